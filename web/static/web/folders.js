// The sidebar's folders: a section that folds away, a folder per line with its count and
// a menu (rename, move up or down, delete), and a new-folder button. A folder opens the
// conversation list narrowed to it; a conversation dragged onto a folder is filed there
// (chooseFolder is the keyboard's way); a folder dragged onto another takes its place.
import { api } from "./api.js";
import { ask } from "./dialogs.js";
import { FreshList, closingMenus, collapsible } from "./sections.js";

export const CONVERSATION_DRAG = "application/x-parley-conversation";
const FOLDER_DRAG = "application/x-parley-folder";
const $ = (id) => document.getElementById(id);

export class Folders {
  // onOpen(folder or null), onFile(conversationId, folderId), onRendered() after any change.
  constructor({ notify, onOpen, onFile, onRendered }) {
    Object.assign(this, { notify, onOpen, onFile, onRendered });
    this.folders = []; // [{id, name, position, conversation_count}] in the user's order
    this.openId = null;
    this.fresh = new FreshList("folders/", { show: (folders) => this.show(folders), status: $("folders-status") });
    this.list = $("folder-list");
    this.section = collapsible($("folders-toggle"), $("folders-body"), "parley.folders.collapsed");
    closingMenus(this.list);
    $("new-folder").addEventListener("click", () => this.create());
    this.list.addEventListener("click", (event) => this.act(event));
    this.dragAndDrop();
  }

  name(id) {
    const folder = this.folders.find((f) => f.id === id);
    return folder ? folder.name : "";
  }

  load() {
    return this.fresh.load();
  }

  // Counts change with every filed conversation: one request for a burst of changes.
  refreshSoon() {
    this.fresh.soon();
  }

  // A folder list from the server (a `folders.changed` frame has no counts: kept).
  show(folders) {
    const counts = new Map(this.folders.map((f) => [f.id, f.conversation_count]));
    this.folders = folders.map((f) => ({ conversation_count: counts.get(f.id) ?? 0, ...f }));
    // The keyboard stays where it was, on the new rows.
    const active = document.activeElement;
    const focused = active && this.list.contains(active) ? active.closest(".folder-item") : null;
    const selector = active && active.matches("summary") ? "summary" : ".folder-open";
    this.list.replaceChildren(...this.folders.map((f, index) => this.renderFolder(f, index)));
    $("folders-status").textContent = this.folders.length ? "" : "No folders yet: + makes one.";
    if (focused) this.focus(focused.dataset.id, selector);
    this.onRendered();
  }

  setOpen(id) {
    this.openId = id;
    for (const item of this.list.children) {
      item.querySelector(".folder-open").setAttribute("aria-pressed", String(item.dataset.id === id));
    }
  }

  focus(id, selector = "summary") {
    const item = this.list.querySelector(`.folder-item[data-id="${id}"]`);
    if (item) item.querySelector(selector).focus();
  }

  renderFolder(folder, index) {
    const template = document.createElement("template");
    template.innerHTML = `
      <li class="folder-item" draggable="true">
        <button type="button" class="folder-open" aria-pressed="false">
          <svg viewBox="0 0 16 16" aria-hidden="true" focusable="false"><path d="M1.5 3.5h4.5l1.5 1.5h7v8h-13z" fill="none" stroke="currentColor" stroke-width="1.2" stroke-linejoin="round"/></svg>
          <span class="folder-name"></span>
          <span class="folder-count"></span>
        </button>
        <details class="item-menu">
          <summary class="icon"><span aria-hidden="true">⋯</span></summary>
          <div class="menu">
            <button type="button" data-folder-action="rename">Rename…</button>
            <button type="button" data-folder-action="up">Move up</button>
            <button type="button" data-folder-action="down">Move down</button>
            <button type="button" data-folder-action="delete" class="danger">Delete…</button>
          </div>
        </details>
      </li>`;
    const item = template.content.firstElementChild;
    item.dataset.id = folder.id;
    item.querySelector(".folder-name").textContent = folder.name;
    const count = folder.conversation_count;
    item.querySelector(".folder-count").textContent = String(count);
    item.querySelector(".folder-count").setAttribute("aria-label", `${count} conversation${count === 1 ? "" : "s"}`);
    item.querySelector(".folder-open").setAttribute("aria-pressed", String(folder.id === this.openId));
    item.querySelector("summary").setAttribute("aria-label", `Actions for folder ${folder.name}`);
    item.querySelector('[data-folder-action="up"]').disabled = index === 0;
    item.querySelector('[data-folder-action="down"]').disabled = index === this.folders.length - 1;
    return item;
  }

  async act(event) {
    const item = event.target.closest(".folder-item");
    if (!item) return;
    const folder = this.folders.find((f) => f.id === item.dataset.id);
    if (!folder) return;
    if (event.target.closest(".folder-open")) {
      this.onOpen(this.openId === folder.id ? null : folder);
      return;
    }
    const button = event.target.closest("button[data-folder-action]");
    if (!button) return;
    item.querySelector("details").open = false;
    const index = this.folders.indexOf(folder);
    try {
      const action = button.dataset.folderAction;
      if (action === "rename") await this.rename(folder);
      else if (action === "up") await this.move(folder, index - 1);
      else if (action === "down") await this.move(folder, index + 1);
      else if (action === "delete") await this.remove(folder);
    } catch (error) {
      this.notify(error.message);
    }
  }

  async create() {
    try {
      const store = (name) => api("folders/", { method: "POST", body: { name } });
      const folder = await named({ title: "New folder", value: "", ok: "Create", store });
      if (!folder) return null;
      await this.load();
      this.notify(`Folder “${folder.name}” created.`);
      return folder;
    } catch (error) {
      this.notify(error.message);
      return null;
    }
  }

  async rename(folder) {
    const store = (name) =>
      name === folder.name ? folder : api(`folders/${folder.id}/`, { method: "PATCH", body: { name } });
    if (await named({ title: "Rename folder", value: folder.name, ok: "Rename", store })) await this.load();
  }

  // The folder goes to `index` in the user's order; the keyboard stays on it.
  async move(folder, index) {
    if (index < 0 || index >= this.folders.length) return;
    await api(`folders/${folder.id}/`, { method: "PATCH", body: { position: index } });
    await this.load();
    this.focus(folder.id);
  }

  async remove(folder) {
    const count = folder.conversation_count;
    const sure = await ask({
      title: "Delete folder?",
      text: `“${folder.name}” will be deleted. Its ${count === 1 ? "conversation stays" : `${count} conversations stay`}, in no folder.`,
      ok: "Delete",
      danger: true,
    });
    if (!sure) return;
    await api(`folders/${folder.id}/`, { method: "DELETE" });
    this.notify(`Deleted folder “${folder.name}”.`);
    await this.load();
  }

  dragAndDrop() {
    const kind = (event) => {
      const types = event.dataTransfer ? [...event.dataTransfer.types] : [];
      if (types.includes(CONVERSATION_DRAG)) return CONVERSATION_DRAG;
      return types.includes(FOLDER_DRAG) ? FOLDER_DRAG : null;
    };
    const unmark = () => {
      for (const marked of this.list.querySelectorAll(".drop-target")) marked.classList.remove("drop-target");
    };
    this.list.addEventListener("dragstart", (event) => {
      const item = event.target.closest && event.target.closest(".folder-item");
      if (!item) return;
      event.dataTransfer.setData(FOLDER_DRAG, item.dataset.id);
      event.dataTransfer.effectAllowed = "move";
    });
    this.list.addEventListener("dragover", (event) => {
      const target = event.target.closest(".folder-item");
      if (!target || !kind(event)) return;
      event.preventDefault();
      event.dataTransfer.dropEffect = "move";
      if (!target.classList.contains("drop-target")) {
        unmark();
        target.classList.add("drop-target");
      }
    });
    this.list.addEventListener("dragleave", (event) => {
      if (!this.list.contains(event.relatedTarget)) unmark();
    });
    this.list.addEventListener("drop", (event) => {
      const target = event.target.closest(".folder-item");
      const dragged = kind(event);
      unmark();
      if (!target || !dragged) return;
      event.preventDefault();
      const id = event.dataTransfer.getData(dragged);
      if (dragged === CONVERSATION_DRAG) {
        this.onFile(id, target.dataset.id);
        return;
      }
      const folder = this.folders.find((f) => f.id === id);
      const index = this.folders.findIndex((f) => f.id === target.dataset.id);
      if (folder && folder.id !== target.dataset.id) this.move(folder, index).catch((e) => this.notify(e.message));
    });
    // A collapsed section opens when a conversation is dragged over its heading.
    $("folders-toggle").addEventListener("dragenter", (event) => {
      if (kind(event) === CONVERSATION_DRAG) this.section.open();
    });
  }
}

// A folder name asked for until `store(name)` takes it (a refusal is said in the dialog,
// the name kept to correct); what it answered, or null when cancelled.
async function named({ title, value, ok, store }) {
  let text = "";
  for (;;) {
    const name = await ask({ title, text, label: "Folder name", value, ok });
    if (name === null || !name.trim()) return null;
    try {
      return await store(name.trim());
    } catch (error) {
      if (error.status !== 400) throw error;
      const problems = (error.details && error.details.problems) || [];
      text = problems.length ? problems.map((p) => `“${name.trim()}” ${p.message}.`).join(" ") : error.message;
      value = name;
    }
  }
}

// "Move to folder…": resolves to a folder id, "" for no folder, "new" for a new folder,
// or null when cancelled. Every choice is a button: Tab and Enter are enough.
export function chooseFolder({ title, folders, current }) {
  const dialog = $("folder-dialog");
  $("folder-dialog-text").textContent = `Where should “${title}” go?`;
  const choice = (value, label, chosen) => {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.value = value;
    button.textContent = label;
    if (chosen) {
      button.setAttribute("aria-current", "true");
      const mark = document.createElement("span");
      mark.className = "muted";
      mark.textContent = " (current)";
      button.append(mark);
    }
    item.append(button);
    return item;
  };
  const choices = $("folder-choices");
  choices.replaceChildren(
    ...folders.map((f) => choice(`folder:${f.id}`, f.name, f.id === current)),
    choice("none", "No folder", !current),
    choice("new", "New folder…", false),
  );
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        const value = dialog.returnValue;
        if (value === "none") resolve("");
        else if (value === "new") resolve("new");
        else if (value.startsWith("folder:")) resolve(value.slice("folder:".length));
        else resolve(null);
      },
      { once: true },
    );
    dialog.showModal();
    (choices.querySelector("[aria-current]") || choices.querySelector("button")).focus();
  });
}
