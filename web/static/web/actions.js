// What can be done with a message: Copy (its text as written: a reply's Markdown source,
// or one code block's text) and Fork to new chat (a new conversation with the messages up
// to this one); Edit and Regenerate are drawn here too but handled by editing.js. The
// buttons are drawn with every message and shown on hover or focus; their clicks are
// handled here once for the whole list.
import { api } from "./api.js";
import { extraAction } from "./editing.js";
import { clearProblem, showProblem } from "./problems.js";

const FEEDBACK_MS = 1500;

// `readOnly` (a shared page's transcript): Copy only.
export function actionBar(article, { readOnly = false } = {}) {
  const bar = document.createElement("div");
  bar.className = "message-actions";
  bar.innerHTML = `${article && !readOnly ? extraAction(article) : ""}
    <button type="button" data-action="copy">Copy</button>
    ${readOnly ? "" : '<button type="button" data-action="fork">Fork to new chat</button>'}
    <span class="action-status visually-hidden" role="status"></span>`;
  return bar;
}

// The Clipboard API where the page may use it; the old copy command otherwise.
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "visually-hidden";
  document.body.append(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  if (!copied) throw new Error("The browser did not allow copying.");
}

// The API's problems in words: "message 3 is inside a tool call group …" (the fork point
// itself), "branch_id: must be a UUID" (any other field).
export function problemText(error) {
  const problems = (error.details && error.details.problems) || [];
  if (!problems.length) return error.message;
  return problems
    .map(({ path, message }) => (path === "$.at_seq" ? message : `${path.replace(/^\$\./, "")}: ${message}`))
    .join("; ");
}

export class MessageActions {
  // `conversation()` is the open conversation; `onForked(conversation)` opens the fork.
  constructor(container, { transcript, conversation, onForked }) {
    this.transcript = transcript;
    this.conversation = conversation;
    this.onForked = onForked;
    container.addEventListener("click", (event) => {
      const code = event.target.closest("button.copy-code");
      if (code) {
        const pre = code.parentElement.querySelector("pre");
        this.copy(code, pre ? pre.textContent.replace(/\n$/, "") : "", "Copy code");
        return;
      }
      const button = event.target.closest(".message-actions button[data-action]");
      if (!button) return;
      const article = button.closest("article");
      if (button.dataset.action === "copy") this.copy(button, this.transcript.textOf(article), "Copy");
      else if (button.dataset.action === "fork") this.fork(article, button);
    });
  }

  async copy(button, text, label) {
    clearTimeout(button.copiedTimer);
    const status = statusFor(button);
    try {
      await copyText(text);
      setLabel(button, "Copied");
      button.dataset.copied = "true";
      if (status) status.textContent = "Copied to the clipboard.";
    } catch (error) {
      setLabel(button, "Copy failed");
      if (status) status.textContent = `Not copied: ${error.message}`;
    }
    button.copiedTimer = setTimeout(() => {
      setLabel(button, label);
      delete button.dataset.copied;
      if (status) status.textContent = "";
    }, FEEDBACK_MS);
  }

  async fork(article, button) {
    clearProblem(article);
    const conversation = this.conversation();
    const point = forkPoint(article);
    if (!conversation || !point) {
      showProblem(article, "This message is not saved yet; try again in a moment.");
      return;
    }
    const body = { at_seq: point.seq };
    if (point.branchId) body.branch_id = point.branchId;
    button.disabled = true;
    statusFor(button).textContent = "Forking…";
    try {
      const fork = await api(`conversations/${conversation.id}/fork/`, { method: "POST", body });
      statusFor(button).textContent = "";
      this.onForked(fork);
    } catch (error) {
      statusFor(button).textContent = "";
      showProblem(article, `Cannot fork here: ${problemText(error)}`);
    } finally {
      button.disabled = false;
    }
  }
}

// Where "Fork to new chat" cuts: after the newest stored message of the entry (for a
// turn, its answer or its last tool result), on that message's branch when it has one.
function forkPoint(article) {
  let best = null;
  for (const element of [article, ...article.querySelectorAll("[data-seq]")]) {
    const seq = Number(element.dataset.seq);
    if (seq && (!best || seq > best.seq)) best = { seq, branchId: element.dataset.branchId || null };
  }
  return best;
}

function statusFor(button) {
  const bar = button.closest(".message-actions");
  return bar ? bar.querySelector(".action-status") : null;
}

// A code block's button names itself by aria-label (its visible word is drawn by the
// style sheet, so it is not part of the reply's text); a message's button by its text.
function setLabel(button, label) {
  if (button.classList.contains("copy-code")) {
    button.setAttribute("aria-label", label === "Copy" ? "Copy code" : label);
    button.dataset.label = label === "Copy code" ? "Copy" : label;
  } else {
    button.textContent = label;
  }
}

