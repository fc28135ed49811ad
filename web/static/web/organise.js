// Pins, tags and folders in the sidebar's list: how an item shows them (pinned ones first
// under a "Pinned" heading, tag chips, its folder's name), the filters the list can be
// narrowed to (a folder, a tag), the menu's Pin, Tags… and Move to folder…, dragging an
// item onto a folder, and following what the user's other tabs change.
//
// The main list shows every conversation, filed or not: a folder, like a tag, is one more
// way to look at them (opening it narrows the list to it), so filing a conversation never
// hides it from "Chats", and the list stays the one the API answers, pinned ones first.
import { api } from "./api.js";
import { CONVERSATION_DRAG, Folders, chooseFolder } from "./folders.js";
import { TagList, editTags, sameTag, searchNamesTag, tagChips } from "./tags.js";

const group = (item) => (item.dataset.pinned === "true" ? 0 : 1);
const time = (item) => Date.parse(item.dataset.activity || "") || 0;
const tagsOf = (item) => JSON.parse(item.dataset.tags || "[]");

// The API's order: pinned ones first, then by the newest activity.
function comesBefore(a, b) {
  return group(a) !== group(b) ? group(a) < group(b) : time(a) > time(b);
}

export class Organiser {
  constructor(sidebar) {
    this.sidebar = sidebar;
    this.list = sidebar.list;
    this.filter = { folder: null, tag: null }; // folder: {id, name}
    this.filters = document.getElementById("list-filters");
    this.folders = new Folders({
      notify: (text) => sidebar.notify(text),
      onOpen: (folder) => this.narrow({ folder: folder && { id: folder.id, name: folder.name } }),
      onFile: (id, folderId) => this.file(id, folderId),
      onRendered: () => this.foldersRendered(),
    });
    this.tags = new TagList({ onPick: (tag) => this.narrow({ tag }) });
    this.list.addEventListener("click", (event) => {
      const chip = event.target.closest("button[data-tag]");
      if (chip) this.narrow({ tag: chip.dataset.tag });
    });
    this.filters.addEventListener("click", (event) => {
      const clear = event.target.closest("button[data-clear]");
      if (clear) this.narrow({ [clear.dataset.clear]: null });
    });
    this.list.addEventListener("dragstart", (event) => {
      const item = event.target.closest && event.target.closest(".conversation-item");
      if (!item) return;
      event.dataTransfer.setData(CONVERSATION_DRAG, item.dataset.id);
      event.dataTransfer.effectAllowed = "copyMove"; // a dragged link still carries its address
    });
    // A tab with no open conversation has no socket to hear of changes: it catches up
    // when it is shown again.
    document.addEventListener("visibilitychange", () => {
      const live = document.getElementById("connection").dataset.state === "online";
      if (document.visibilityState === "visible" && !live) this.refresh();
    });
    this.folders.load();
    this.tags.load();
  }

  refresh() {
    this.sidebar.reload();
    this.folders.load();
    this.tags.load();
  }

  // --- what the list asks for ---------------------------------------------------------

  query(q, archived) {
    const params = new URLSearchParams({ archived: q ? "all" : String(archived) });
    if (q) params.set("q", q);
    if (this.filter.folder) params.set("folder", this.filter.folder.id);
    if (this.filter.tag) params.set("tag", this.filter.tag);
    return params.toString();
  }

  filtered() {
    return Boolean(this.filter.folder || this.filter.tag);
  }

  // A search in a narrowed list (or naming `tag:`) matches titles, on the server: message
  // hits carry no folder or tags to narrow them by.
  narrowed(q) {
    return this.filtered() || searchNamesTag(q);
  }

  emptyText(q, archived) {
    if (q) return `Nothing matches “${q}”.`;
    const { folder, tag } = this.filter;
    const which = archived ? "archived conversations" : "conversations";
    if (folder && tag) return `No ${which} tagged “${tag}” in this folder.`;
    if (folder) return archived ? `No ${which} in this folder.` : "This folder is empty: drag a conversation onto it, or use “Move to folder…” in its menu.";
    if (tag) return `No ${which} tagged “${tag}”.`;
    return null;
  }

  fits(conversation) {
    const { folder, tag } = this.filter;
    if (folder && (conversation.folder_id || null) !== folder.id) return false;
    return !tag || (conversation.tags || []).some((name) => sameTag(name, tag));
  }

  narrow(change) {
    Object.assign(this.filter, change);
    this.folders.setOpen(this.filter.folder && this.filter.folder.id);
    this.tags.setActive(this.filter.tag);
    this.drawFilters();
    this.sidebar.reload();
  }

  drawFilters() {
    const chips = [];
    const { folder, tag } = this.filter;
    if (folder) chips.push(filterChip("folder", "Folder", folder.name));
    if (tag) chips.push(filterChip("tag", "Tag", tag));
    this.filters.replaceChildren(...chips);
    this.filters.hidden = !chips.length;
    // A search in a narrowed list matches titles only (see `narrowed`).
    const search = this.sidebar.search;
    search.dataset.placeholder ??= search.placeholder;
    search.placeholder = chips.length ? "Search titles in this list" : search.dataset.placeholder;
  }

  // --- items ---------------------------------------------------------------------------

  // The fields a payload or a frame has (a search hit has none of them).
  decorate(item, conversation) {
    if ("pinned" in conversation) item.dataset.pinned = String(Boolean(conversation.pinned));
    if ("folder_id" in conversation) item.dataset.folder = conversation.folder_id || "";
    if ("tags" in conversation) item.dataset.tags = JSON.stringify(conversation.tags || []);
    if (conversation.last_activity_at) item.dataset.activity = conversation.last_activity_at;
    item.draggable = true;
    const pinned = item.dataset.pinned === "true";
    item.querySelector('[data-action="pin"]').textContent = pinned ? "Unpin" : "Pin";
    const mark = item.querySelector(".pin-mark");
    if (pinned && !mark) {
      const hidden = document.createElement("span");
      hidden.className = "pin-mark visually-hidden";
      hidden.textContent = "Pinned: ";
      item.querySelector(".conversation-link").prepend(hidden);
    } else if (!pinned && mark) {
      mark.remove();
    }
    this.drawMeta(item);
  }

  drawMeta(item) {
    let meta = item.querySelector(".item-meta");
    if (!meta) {
      meta = document.createElement("div");
      meta.className = "item-meta";
      item.append(meta);
    }
    const parts = [];
    const folderId = item.dataset.folder;
    const shownFolder = this.filter.folder && this.filter.folder.id === folderId;
    const name = folderId && !shownFolder ? this.folders.name(folderId) : "";
    if (name) {
      const label = document.createElement("span");
      label.className = "folder-label";
      label.title = `In the folder “${name}”`;
      label.textContent = name;
      parts.push(label);
    }
    parts.push(...tagChips(tagsOf(item)));
    meta.replaceChildren(...parts);
    meta.hidden = !parts.length;
  }

  // Where the item goes in the list; `first`: at the top of its group (new activity).
  place(item, { first = false } = {}) {
    const items = [...this.list.querySelectorAll(":scope > .conversation-item")].filter((o) => o !== item);
    const last = items[items.length - 1];
    let before = null;
    if (first || (last && comesBefore(item, last))) {
      before = items.find((other) => (first ? group(other) >= group(item) : comesBefore(item, other))) || null;
    }
    this.list.insertBefore(item, before);
    this.tidy();
  }

  // An item left the list (deleted, archived, filtered out): the counts may change too.
  removed(item) {
    this.tidy();
    if (item && item.dataset.folder) this.folders.refreshSoon();
    if (item && tagsOf(item).length) this.tags.refreshSoon();
  }

  // The "Pinned" and "Recent" headings, when something is pinned.
  tidy() {
    for (const heading of this.list.querySelectorAll(":scope > .list-heading")) heading.remove();
    const pinned = this.list.querySelector(':scope > .conversation-item[data-pinned="true"]');
    if (!pinned) return;
    this.list.insertBefore(heading("Pinned"), pinned);
    const other = this.list.querySelector(':scope > .conversation-item:not([data-pinned="true"])');
    if (other) this.list.insertBefore(heading("Recent"), other);
  }

  // Whether the item's place is among the pages loaded (else a later page brings it).
  withinLoaded(item) {
    if (!this.sidebar.next) return true;
    const items = [...this.list.querySelectorAll(":scope > .conversation-item")].filter((o) => o !== item);
    return !items.length || !comesBefore(items[items.length - 1], item);
  }

  // A conversation's new pin, folder or tags (an answer, or a frame from another tab).
  // `fetch`: one the list does not show yet but now belongs in is fetched and added.
  async apply(update, { fetch = false } = {}) {
    const sidebar = this.sidebar;
    const browsing = !sidebar.search.value.trim();
    const item = sidebar.items.get(update.id);
    if (item) {
      this.decorate(item, update);
      if (browsing && (!this.fits(update) || !this.withinLoaded(item))) {
        sidebar.remove(update.id);
        if (!sidebar.items.size && !sidebar.next) sidebar.status.textContent = this.emptyText("", sidebar.archived) || "";
      } else {
        this.place(item);
      }
      return;
    }
    if (!fetch || !browsing || !this.fits(update)) return;
    const generation = sidebar.generation;
    let conversation;
    try {
      conversation = await api(`conversations/${update.id}/`);
    } catch {
      return; // deleted meanwhile, or offline: the next reload shows it
    }
    if (generation !== sidebar.generation || sidebar.items.has(update.id)) return;
    if (conversation.archived !== sidebar.archived || !this.fits(conversation)) return;
    const added = sidebar.add(conversation);
    if (!this.withinLoaded(added)) sidebar.remove(update.id);
  }

  // `conversation.organised` and `folders.changed` frames (any of the user's sockets).
  follow(frame) {
    if (frame.type === "folders.changed") {
      this.folders.show(frame.folders);
      return;
    }
    const item = this.sidebar.items.get(frame.conversation_id);
    if (!item || (item.dataset.folder || "") !== (frame.folder_id || "")) this.folders.refreshSoon();
    if (!item || item.dataset.tags !== JSON.stringify(frame.tags || [])) this.tags.refreshSoon();
    const { pinned, tags } = frame;
    this.apply({ id: frame.conversation_id, pinned, folder_id: frame.folder_id, tags }, { fetch: true });
  }

  foldersRendered() {
    const known = new Set(this.folders.folders.map((folder) => folder.id));
    for (const item of this.sidebar.items.values()) {
      // A deleted folder's conversations are in no folder now.
      if (item.dataset.folder && !known.has(item.dataset.folder)) item.dataset.folder = "";
      this.drawMeta(item);
    }
    const open = this.filter.folder;
    if (open && !known.has(open.id)) {
      this.narrow({ folder: null });
    } else if (open) {
      open.name = this.folders.name(open.id);
      this.drawFilters();
    }
  }

  // --- the menu's actions --------------------------------------------------------------

  async act(action, item, title) {
    const id = item.dataset.id;
    if (action === "pin") {
      const pinned = item.dataset.pinned !== "true";
      this.apply(await api(`conversations/${id}/`, { method: "PATCH", body: { pinned } }));
    } else if (action === "tags") {
      await this.tags.load(); // suggestions as they are now, whatever other tabs did
      await editTags({
        title,
        tags: tagsOf(item),
        known: this.tags.names(),
        save: async (tags) => {
          this.apply(await api(`conversations/${id}/`, { method: "PATCH", body: { tags } }));
          this.tags.refreshSoon();
        },
      });
    } else if (action === "folder") {
      const current = item.dataset.folder || "";
      let choice = await chooseFolder({ title, folders: this.folders.folders, current });
      if (choice === "new") choice = ((await this.folders.create()) || {}).id ?? null;
      if (choice !== null && choice !== current) await this.file(id, choice);
    }
    // The keyboard stays on the conversation, wherever it moved to.
    if (item.isConnected) item.querySelector("summary").focus();
  }

  async file(id, folderId) {
    const item = this.sidebar.items.get(id);
    if (item && (item.dataset.folder || "") === (folderId || "")) return; // already there
    const title = item ? item.querySelector(".title").textContent : "The conversation";
    try {
      const body = { folder_id: folderId || null };
      this.apply(await api(`conversations/${id}/`, { method: "PATCH", body }));
      this.folders.refreshSoon();
      this.sidebar.notify(folderId ? `Moved “${title}” to “${this.folders.name(folderId)}”.` : `“${title}” is in no folder now.`);
    } catch (error) {
      this.sidebar.notify(error.message);
    }
  }
}

function heading(text) {
  const item = document.createElement("li");
  item.className = "list-heading";
  item.setAttribute("aria-hidden", "true"); // each pinned item says so itself
  item.textContent = text;
  return item;
}

function filterChip(kind, label, value) {
  const chip = document.createElement("span");
  chip.className = "filter-chip";
  chip.textContent = `${label}: ${value}`;
  const clear = document.createElement("button");
  clear.type = "button";
  clear.dataset.clear = kind;
  clear.setAttribute("aria-label", `Clear the ${kind} filter`);
  clear.title = `Show all, not only this ${kind}`;
  clear.textContent = "×";
  chip.append(clear);
  return chip;
}
