"""Bar charts as inline SVG, drawn on the server: no JavaScript, no chart library."""

from collections.abc import Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH = 760
HEIGHT = 180
MARGIN_LEFT = 60
MARGIN_BOTTOM = 22
BAR_HEIGHT = 20


def _grouped(value: int) -> str:
    return f"{value:,}"


def column_chart(points: Sequence[tuple[str, int]], *, label: str, color: str) -> SafeString:
    """One vertical bar per point (a day), with the maximum on the axis and every bar's
    exact value in its tooltip."""
    top = max((value for _, value in points), default=0) or 1
    plot_w = WIDTH - MARGIN_LEFT - 8
    plot_h = HEIGHT - MARGIN_BOTTOM - 8
    step = plot_w / max(len(points), 1)
    bar_w = max(step * 0.8, 1.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}">',
        f'<line x1="{MARGIN_LEFT}" y1="8" x2="{MARGIN_LEFT}" y2="{8 + plot_h}" stroke="#999"/>',
        f'<line x1="{MARGIN_LEFT}" y1="{8 + plot_h}" x2="{WIDTH - 8}" y2="{8 + plot_h}" '
        'stroke="#999"/>',
        f'<text x="{MARGIN_LEFT - 4}" y="14" font-size="11" text-anchor="end">'
        f"{_grouped(top)}</text>",
        f'<text x="{MARGIN_LEFT - 4}" y="{8 + plot_h}" font-size="11" text-anchor="end">0</text>',
    ]
    label_every = max(1, len(points) // 8)
    for index, (name, value) in enumerate(points):
        height = plot_h * value / top
        x = MARGIN_LEFT + index * step + (step - bar_w) / 2
        y = 8 + plot_h - height
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{height:.1f}" '
            f'fill="{color}"><title>{escape(name)}: {_grouped(value)}</title></rect>'
        )
        if index % label_every == 0:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{HEIGHT - 6}" font-size="10" '
                f'text-anchor="middle">{escape(name[5:])}</text>'
            )
    parts.append("</svg>")
    # Every interpolated text went through escape(); the rest is fixed markup and numbers.
    return mark_safe("".join(parts))


def bar_chart(points: Sequence[tuple[str, int]], *, label: str, color: str) -> SafeString:
    """Horizontal bars, one per named item (top users), longest first as given."""
    top = max((value for _, value in points), default=0) or 1
    name_w = 160
    plot_w = WIDTH - name_w - 90
    height = max(len(points), 1) * (BAR_HEIGHT + 6) + 4
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(label)}">'
    ]
    for index, (name, value) in enumerate(points):
        y = 4 + index * (BAR_HEIGHT + 6)
        width = plot_w * value / top
        parts.append(
            f'<text x="{name_w - 6}" y="{y + 14}" font-size="12" text-anchor="end">'
            f"{escape(name[:24])}</text>"
            f'<rect x="{name_w}" y="{y}" width="{width:.1f}" height="{BAR_HEIGHT}" '
            f'fill="{color}"><title>{escape(name)}: {_grouped(value)}</title></rect>'
            f'<text x="{name_w + width + 6:.1f}" y="{y + 14}" font-size="12">'
            f"{_grouped(value)}</text>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))
