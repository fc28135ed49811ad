"""Pages other than the chat under the site's Content-Security-Policy, in a real browser:
the admin (actions, date filter, owner autocomplete, date-time shortcuts, usage charts,
transcript), the API docs and an error page all work and the browser reports no violation."""

import re

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from accounts.models import User
from conversations import services
from tests.support.browser import Stack, log_in

pytestmark = pytest.mark.django_db(transaction=True)

# Every violation the browser reports on a page, as a console line the test collects.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  console.error(`csp-violation ${event.violatedDirective} ${event.blockedURI}`);
});
"""


@pytest.fixture
def watched(page: Page) -> tuple[Page, list[str]]:
    violations: list[str] = []
    page.add_init_script(REPORT_VIOLATIONS)
    page.on(
        "console",
        lambda message: (
            violations.append(message.text)
            if message.text.startswith("csp-violation") or "Content Security Policy" in message.text
            else None
        ),
    )
    return page, violations


def test_the_watch_sees_a_violation(watched):
    """The control: an inline script on a page is refused and reported."""
    page, violations = watched
    page.goto("/accounts/login/")
    page.evaluate(
        """() => { const s = document.createElement("script");
                   s.textContent = "window.__ran = 1"; document.body.append(s); }"""
    )
    page.wait_for_timeout(200)
    assert page.evaluate("window.__ran") is None
    assert any("script-src" in line for line in violations)


def test_admin_and_api_docs_work_without_violations(
    watched, context: BrowserContext, stack: Stack, owner
):
    page, violations = watched
    root = User.objects.create_superuser(username="root", password="pw-root-123")
    conversation = services.conversation_create(owner=owner, title="Policy check")
    services.user_message_append(conversation=conversation, content="Transcript line")
    log_in(context, stack, root)

    page.goto("/admin/conversations/conversation/")
    page.locator("input.action-select").first.check()
    expect(page.locator(".action-counter")).to_contain_text("1 of 1 selected")
    page.locator("#changelist-filter a", has_text="Past 7 days").first.click()
    expect(page).to_have_url(re.compile(r"__gte="))
    expect(page.locator("input.action-select")).to_have_count(1)
    # The owner picker: select2 asks the admin's autocomplete view as the user types.
    page.locator("#owner-filter .select2-selection").click()
    page.locator(".select2-search__field").fill(owner.username[:3])
    expect(page.locator(".select2-results__option", has_text=owner.username)).to_be_visible()

    page.goto(f"/admin/accounts/user/{owner.pk}/change/")
    page.locator("#id_date_joined_0").fill("")
    shortcuts = page.locator("#id_date_joined_0 + .datetimeshortcuts")
    shortcuts.get_by_text("Today").click()
    expect(page.locator("#id_date_joined_0")).not_to_have_value("")
    shortcuts.locator(".date-icon").click()
    expect(page.locator(".calendarbox:visible")).to_have_count(1)

    page.goto("/admin/conversations/conversation/usage/")
    expect(page.locator("svg[role=img]").first).to_be_visible()
    page.goto(f"/admin/conversations/conversation/{conversation.pk}/transcript/")
    expect(page.get_by_text("Transcript line")).to_be_visible()

    page.goto("/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Parley API")
    page.goto("/no/such/page/")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()

    page.wait_for_timeout(200)
    assert violations == []
    assert page.errors == []


def test_redoc_loads_nothing_from_other_sites(watched, stack: Stack):
    page, violations = watched
    page.goto("/api/redoc/")
    expect(page.get_by_role("heading", name="Parley API").first).to_be_visible()
    page.wait_for_timeout(300)
    # Redoc's bundle always shows its maker's logo from their server (the stock page also
    # fetched web fonts): the policy refuses the logo, and nothing else is refused.
    assert all("cdn.redoc.ly/redoc/logo-mini.svg" in line for line in violations), violations
