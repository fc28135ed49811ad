// ‹ k/n ›: where a message has other versions (its question was edited, its reply
// regenerated), a small switcher under it, always visible. A question shows its own
// versions; an assistant turn shows those of its first message, since a regeneration forks
// right after the question. Drawn from each stored message's `alternatives`
// (`{index, count, branch_ids}`); a click is handled by branches.js, which shows the
// chosen version's path. While a reply runs the switcher is disabled (the server refuses a
// switch then too).

export const SWITCH_BUSY = "Wait for the reply to finish to see the other versions.";

// A reply is running (or about to): the page marks the message list busy.
export function isBusy() {
  const box = document.getElementById("messages");
  return Boolean(box) && box.getAttribute("aria-busy") === "true";
}

// Called for every stored message drawn (transcript.js `stamp`). Messages from a server
// without branches carry no `alternatives`: nothing is drawn.
export function markVersions(element, message) {
  if (message.role === "tool" || !("alternatives" in message)) return;
  const article = element.closest("article");
  if (!article) return;
  if (element !== article) {
    // A part of an assistant turn: only the turn's first saved message speaks for it.
    const first = [...article.querySelectorAll(":scope > .part")].find((part) => part.dataset.seq);
    if (first !== element) return;
  }
  showVersions(article, message.alternatives);
}

// Draw, update or remove an entry's switcher.
export function showVersions(article, alternatives) {
  let box = article.querySelector(":scope > .versions");
  if (!alternatives || !(alternatives.count > 1)) {
    if (box) box.remove();
    return;
  }
  if (!box) {
    box = versionsBox();
    const actions = article.querySelector(":scope > .message-actions");
    if (actions) actions.before(box);
    else article.append(box);
  }
  fillVersions(box, alternatives);
}

export function versionsBox() {
  const box = document.createElement("div");
  box.className = "versions";
  box.setAttribute("role", "group");
  box.innerHTML = `
    <button type="button" class="version-step" data-step="-1" aria-label="Previous version">‹</button>
    <span class="version-count" aria-hidden="true"></span>
    <button type="button" class="version-step" data-step="1" aria-label="Next version">›</button>`;
  return box;
}

export function fillVersions(box, { index, count, branch_ids: branchIds }) {
  box.setAttribute("aria-label", `Version ${index + 1} of ${count}`);
  box.querySelector(".version-count").textContent = `${index + 1}/${count}`;
  for (const button of box.querySelectorAll("button.version-step")) {
    const target = (branchIds || [])[index + Number(button.dataset.step)];
    if (target) button.dataset.branchId = target;
    else delete button.dataset.branchId;
  }
  syncVersions(box);
}

// Enabled where there is a version that way and no reply runs.
export function syncVersions(root) {
  const busy = isBusy();
  for (const button of root.querySelectorAll(".versions button.version-step")) {
    const target = Boolean(button.dataset.branchId);
    button.disabled = busy || !target;
    if (busy && target) button.title = SWITCH_BUSY;
    else button.removeAttribute("title");
  }
}
