// Edit a question, regenerate a reply.
//
// *Edit* (on the user's messages) opens an editor in place of the message; saving asks
// again with the new text. *Regenerate* (on an assistant turn) answers the turn's question
// again. Either way the server starts a new branch, makes it the one shown and starts a run
// on it; the page then shows the new branch's path (branches.js), where the later messages
// are gone and the reply streams in like any other. The old version stays, one ‹ k/n › away.
//
// Both are disabled while a reply runs (one reply at a time), with the reason in their
// tooltip; should the server still refuse (409), the page says why. A failed edit never
// loses the text: the editor stays open with it. An edited question keeps its files.
import { api, isRunActive } from "./api.js";
import { attachmentIds } from "./files.js";
import { isBusy } from "./versions.js";
import { clearProblem, showProblem } from "./problems.js";

const LABEL = { edit: "Edit", regenerate: "Regenerate" };
const TITLE = {
  edit: "Edit this message and ask again",
  regenerate: "Write this reply again",
};
const BUSY_TITLE = {
  edit: "Wait for the reply to finish (or press Stop) to edit a message.",
  regenerate: "Wait for the reply to finish (or press Stop) to regenerate.",
};
const RUNNING = "A reply is running: wait for it to finish (or press Stop), then try again.";

function actionOf(article) {
  if (article.matches(".message.user")) return "edit";
  if (article.matches(".message.assistant")) return "regenerate";
  return null;
}

// The entry's own action for its bar (actions.js), as HTML: Edit on a question,
// Regenerate on a turn, nothing on other entries.
export function extraAction(article) {
  const action = actionOf(article);
  if (!action) return "";
  const busy = isBusy();
  const title = busy ? BUSY_TITLE[action] : TITLE[action];
  return `<button type="button" data-action="${action}" title="${title}"${busy ? " disabled" : ""}>${LABEL[action]}</button>`;
}

function syncActions(root) {
  const busy = isBusy();
  for (const button of root.querySelectorAll(".message-actions button[data-action=edit], .message-actions button[data-action=regenerate]")) {
    if (button.dataset.working) continue;
    const action = button.dataset.action;
    button.disabled = busy;
    button.title = busy ? BUSY_TITLE[action] : TITLE[action];
  }
}

// One id per thing asked: asked again (after a lost answer, say), the server starts no
// second run. `holder` keeps it while `what` is the same.
function clientId(holder, what) {
  if (holder.dataset.clientId && holder.dataset.clientFor === what) return holder.dataset.clientId;
  holder.dataset.clientId = crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2);
  holder.dataset.clientFor = what;
  return holder.dataset.clientId;
}

// The API's refusal in words: its problems by field when it names them.
function problemText(error) {
  if (isRunActive(error)) return RUNNING;
  const problems = (error.details && error.details.problems) || [];
  if (!problems.length) return error.message;
  return problems.map(({ message }) => message).join("; ");
}

export class Editing {
  // `state` is the page's (conversation, activeRun, shown); `setActiveRun` locks the composer;
  // `branches` shows the new branch's path; `maxChars` is the longest message.
  constructor(container, { transcript, branches, state, setActiveRun, maxChars }) {
    this.container = container;
    this.transcript = transcript;
    this.branches = branches;
    this.state = state;
    this.setActiveRun = setActiveRun;
    this.maxChars = maxChars;
    container.addEventListener("click", (event) => {
      const cancel = event.target.closest(".edit-form button[data-edit=cancel]");
      if (cancel) {
        this.close(cancel.closest("form"), { focus: true });
        return;
      }
      const button = event.target.closest(".message-actions button[data-action]");
      if (!button || button.disabled) return;
      const article = button.closest("article");
      if (button.dataset.action === "edit") this.open(article);
      else if (button.dataset.action === "regenerate") this.regenerate(article, button);
    });
    container.addEventListener("submit", (event) => {
      const form = event.target.closest(".edit-form");
      if (!form) return;
      event.preventDefault();
      this.save(form);
    });
    container.addEventListener("keydown", (event) => {
      const form = event.target.closest(".edit-form");
      if (!form || event.isComposing) return;
      if (event.key === "Escape") {
        event.preventDefault();
        this.close(form, { focus: true });
      } else if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        this.save(form);
      }
    });
    container.addEventListener("input", (event) => {
      if (event.target.matches(".edit-form textarea")) autosize(event.target);
    });
    new MutationObserver(() => syncActions(container)).observe(container, {
      attributes: true,
      attributeFilter: ["aria-busy"],
    });
  }

  // --- editing a question ----------------------------------------------------------------

  open(article) {
    const existing = article.querySelector(":scope > .edit-form");
    if (existing) {
      existing.querySelector("textarea").focus();
      return;
    }
    clearProblem(article);
    const form = document.createElement("form");
    form.className = "edit-form";
    const id = `edit-${article.dataset.id || "pending"}`;
    form.innerHTML = `
      <label class="visually-hidden" for="${id}">Edit your message</label>
      <textarea id="${id}" rows="2"></textarea>
      <p class="edit-error small" role="alert"></p>
      <div class="edit-actions">
        <span class="small muted">Ctrl+Enter saves, Esc cancels</span>
        <button type="button" data-edit="cancel">Cancel</button>
        <button type="submit" class="primary">Save &amp; submit</button>
      </div>`;
    const textarea = form.querySelector("textarea");
    textarea.value = this.transcript.textOf(article);
    article.querySelector(":scope > .content").after(form);
    article.classList.add("editing");
    autosize(textarea);
    textarea.focus();
    textarea.setSelectionRange(textarea.value.length, textarea.value.length);
  }

  close(form, { focus = false } = {}) {
    const article = form.closest("article");
    form.remove();
    if (!article) return;
    article.classList.remove("editing");
    if (focus) {
      const button = article.querySelector(".message-actions button[data-action=edit]");
      if (button && !button.disabled) button.focus();
    }
  }

  async save(form) {
    if (form.dataset.saving) return;
    const article = form.closest("article");
    const textarea = form.querySelector("textarea");
    const content = textarea.value;
    const attachments = attachmentIds(article);
    const refuse = (text) => {
      form.querySelector(".edit-error").textContent = text;
      textarea.focus();
    };
    if (!content.trim() && !attachments.length) return refuse("A message cannot be empty.");
    if (content.length > this.maxChars) return refuse(`A message can be at most ${this.maxChars} characters.`);
    const conversation = this.state.conversation;
    if (!conversation || !article.dataset.id) return refuse("This message is not saved yet; try again in a moment.");
    if (this.state.activeRun) return refuse(RUNNING);
    refuse("");
    setSaving(form, true);
    const shown = this.state.shown;
    const url = `conversations/${conversation.id}/messages/${article.dataset.id}/edit/`;
    const started = await this.start(url, { content, attachments, client_id: clientId(form, content) });
    if (started === true) {
      if (form.isConnected) this.close(form); // the new path did not replace it
      return;
    }
    if (shown !== this.state.shown) return;
    setSaving(form, false);
    refuse(isRunActive(started) ? RUNNING : `Not sent: ${problemText(started)}`);
  }

  // --- regenerating a reply ----------------------------------------------------------------

  async regenerate(article, button) {
    clearProblem(article);
    const conversation = this.state.conversation;
    // The turn's last saved message: the server answers again the question that caused it.
    const saved = [...article.querySelectorAll(":scope > .part")].filter((part) => part.dataset.id && Number(part.dataset.seq));
    const last = saved[saved.length - 1];
    if (!conversation || !last) {
      showProblem(article, "This reply was not saved, so it cannot be regenerated: edit the question to ask again.");
      return;
    }
    if (this.state.activeRun) {
      showProblem(article, RUNNING);
      return;
    }
    button.dataset.working = "true";
    button.disabled = true;
    button.textContent = "Regenerating…";
    const shown = this.state.shown;
    const url = `conversations/${conversation.id}/messages/${last.dataset.id}/regenerate/`;
    const started = await this.start(url, { client_id: clientId(button, last.dataset.id) });
    delete button.dataset.working;
    if (started === true) delete button.dataset.clientId; // the next click asks anew
    button.textContent = LABEL.regenerate;
    syncActions(article);
    if (started !== true && shown === this.state.shown) {
      showProblem(article, `Cannot regenerate: ${problemText(started)}`);
    }
  }

  // --- both ----------------------------------------------------------------------------------

  // Ask the server; on its 202 show the new branch (the reply then streams in). True when
  // it started, else the error.
  async start(url, body) {
    // Locked at once, as when a message is sent: the run's own events follow.
    const shown = this.state.shown; // the page's count of conversations opened
    this.setActiveRun({ id: "pending", status: "queued" });
    let answer;
    try {
      answer = await api(url, { method: "POST", body });
    } catch (error) {
      const run = this.state.activeRun;
      if (shown === this.state.shown && run && run.id === "pending") this.setActiveRun(null);
      return error;
    }
    if (shown !== this.state.shown) return true; // another conversation was opened meanwhile
    const run = this.state.activeRun;
    if (!run || run.id === "pending") this.setActiveRun(answer.run);
    await this.branches.follow(answer.branch.id, { bottom: true });
    this.transcript.scrollToBottom();
    return true;
  }
}

function setSaving(form, saving) {
  if (saving) form.dataset.saving = "true";
  else delete form.dataset.saving;
  for (const button of form.querySelectorAll("button")) button.disabled = saving;
  form.querySelector("button[type=submit]").textContent = saving ? "Saving…" : "Save & submit";
}

function autosize(textarea) {
  textarea.style.height = "auto";
  textarea.style.height = `${Math.min(textarea.scrollHeight + 2, 400)}px`;
}

