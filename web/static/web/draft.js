// The draft panel: the user edits and saves; the assistant's changes (its update_draft
// tool) and other tabs' saves arrive live. Unsaved typing is never overwritten silently.
import { api } from "./api.js";

export class DraftPanel {
  constructor({ ensureConversation }) {
    this.ensureConversation = ensureConversation; // a new chat is created by its first save
    this.input = document.getElementById("draft-input");
    this.status = document.getElementById("draft-status");
    this.save = document.getElementById("draft-save");
    this.saved = "";
    this.touched = false; // the user typed or saved since the page loaded
    this.input.addEventListener("input", () => {
      this.touched = true;
      this.status.textContent = this.dirty() ? "Unsaved changes" : "";
    });
    this.input.addEventListener("keydown", (event) => {
      if ((event.ctrlKey || event.metaKey) && event.key === "s") {
        event.preventDefault();
        this.store();
      }
    });
    this.save.addEventListener("click", () => this.store());
  }

  dirty() {
    return this.input.value !== this.saved;
  }

  load(text) {
    // The page's first read of the conversation can land after the user began typing or
    // even saved: their text is newer, so it stays (later changes arrive as `changed`).
    if (this.touched) return;
    this.saved = text;
    this.input.value = text;
    this.status.textContent = "";
  }

  // Another conversation is opened: its draft is loaded next (a new chat's stays empty).
  reset() {
    this.touched = false;
    this.load("");
  }

  // A change from elsewhere; `by` is "assistant" or "user" (another tab).
  changed(text, by) {
    if (text === this.saved) return;
    const wasDirty = this.dirty();
    this.saved = text;
    if (wasDirty && this.input.value !== text) {
      this.status.textContent =
        by === "assistant"
          ? "Parley changed the draft while you were typing; saving keeps your version."
          : "The draft was changed elsewhere; saving keeps your version.";
      return;
    }
    this.input.value = text;
    this.status.textContent = by === "assistant" ? "Updated by Parley" : "Updated";
    this.input.classList.remove("flash");
    void this.input.offsetWidth; // restart the highlight animation
    this.input.classList.add("flash");
  }

  async store() {
    this.touched = true;
    const text = this.input.value;
    this.save.disabled = true;
    this.status.textContent = "Saving…";
    try {
      const { id } = await this.ensureConversation();
      const answer = await api(`conversations/${id}/draft/`, { method: "PUT", body: { draft: text } });
      this.saved = answer.draft;
      this.status.textContent = answer.changed ? "Saved — Parley will be told next turn" : "Saved";
    } catch (error) {
      this.status.textContent = error.message;
    } finally {
      this.save.disabled = false;
    }
  }
}
