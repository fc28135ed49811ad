// The conversation list: pages load as the list is scrolled, a search box (titles and
// message text), archived view, and per-conversation rename/archive/export/delete. Pins,
// tags and folders (the list's order, filters and menu entries) are organise.js's.
import { api } from "./api.js";
import { ask } from "./dialogs.js";
import { Organiser } from "./organise.js";
import { closingMenus } from "./sections.js";
import { openShareDialog } from "./shares.js";

const PAGE = 30;

export class Sidebar {
  constructor({ currentId, onChanged, onDeleted, notify }) {
    this.currentId = currentId;
    this.onChanged = onChanged; // (conversation) after rename/archive of the open one
    this.onDeleted = onDeleted; // (id) after the open conversation was deleted
    this.notify = notify;
    this.list = document.getElementById("conversation-list");
    this.status = document.getElementById("list-status");
    this.search = document.getElementById("search");
    this.archived = false;
    this.next = null;
    this.loading = false;
    this.generation = 0; // answers to an outdated query are dropped
    this.items = new Map();
    this.organiser = new Organiser(this); // pins, tags, folders (organise.js)

    document.getElementById("search-form").addEventListener("submit", (e) => e.preventDefault());
    let debounce = null;
    this.search.addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => this.reload(), 250);
    });
    for (const [id, archived] of [["show-active", false], ["show-archived", true]]) {
      document.getElementById(id).addEventListener("click", () => {
        this.archived = archived;
        document.getElementById("show-active").setAttribute("aria-pressed", String(!archived));
        document.getElementById("show-archived").setAttribute("aria-pressed", String(archived));
        this.reload();
      });
    }
    new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.more();
    }, { root: document.getElementById("sidebar") }).observe(document.getElementById("list-sentinel"));
    closingMenus(this.list);
  }

  async reload() {
    this.generation += 1;
    this.list.replaceChildren();
    this.items.clear();
    this.next = null;
    const q = this.search.value.trim();
    if (q && !this.organiser.narrowed(q)) {
      await this.searchFor(q, this.generation);
    } else {
      this.next = `conversations/?${this.organiser.query(q, this.archived)}&limit=${PAGE}`;
      await this.more();
    }
  }

  async more() {
    if (this.loading || !this.next) return;
    const generation = this.generation;
    this.loading = true;
    this.status.textContent = "Loading…";
    try {
      const page = await api(this.next);
      if (generation !== this.generation) return;
      for (const conversation of page.results) this.add(conversation);
      this.next = page.next;
      const empty = this.organiser.emptyText(this.search.value.trim(), this.archived);
      this.status.textContent = this.items.size
        ? ""
        : empty || (this.archived ? "No archived conversations." : "No conversations yet.");
    } catch (error) {
      this.status.textContent = error.message;
    } finally {
      this.loading = false;
    }
  }

  async searchFor(q, generation) {
    this.status.textContent = "Searching…";
    try {
      const query = encodeURIComponent(q);
      const [titles, hits] = await Promise.all([
        api(`conversations/?q=${query}&archived=all&limit=${PAGE}`),
        api(`search/?q=${query}`),
      ]);
      if (generation !== this.generation) return;
      for (const conversation of titles.results) this.add(conversation);
      for (const hit of hits.results) {
        const item = this.items.get(hit.conversation_id);
        if (item) {
          if (!item.querySelector(".snippet")) setSnippet(item, hit.snippet);
        } else {
          const added = this.add({ id: hit.conversation_id, title: hit.conversation_title, archived: false });
          setSnippet(added, hit.snippet);
        }
      }
      this.status.textContent = this.items.size ? "" : `Nothing matches “${q}”.`;
    } catch (error) {
      this.status.textContent = error.message;
    }
  }

  add(conversation, { first = false } = {}) {
    const existing = this.items.get(conversation.id);
    if (existing) {
      setTitle(existing, conversation.title || "Untitled");
      if (first) this.organiser.place(existing, { first });
      return existing;
    }
    const item = renderItem(conversation, conversation.id === this.currentId);
    item.addEventListener("click", (event) => this.act(event, item));
    this.organiser.decorate(item, conversation);
    this.items.set(conversation.id, item);
    this.organiser.place(item, { first });
    this.status.textContent = "";
    return item;
  }

  // Another conversation is open (null: a new chat): the list marks it.
  setCurrent(id) {
    this.currentId = id;
    for (const [key, item] of this.items) {
      const link = item.querySelector("a.conversation-link");
      if (key === id) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }

  // The open conversation got a new title or new activity: show it first.
  touch(conversation) {
    const elsewhere = this.organiser.filtered() && !this.items.has(conversation.id);
    if (this.search.value.trim() || this.archived || elsewhere) {
      const item = this.items.get(conversation.id);
      if (item && conversation.title) setTitle(item, conversation.title);
      return;
    }
    this.add(conversation, { first: true });
  }

  async act(event, item) {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    item.querySelector("details").open = false;
    const id = item.dataset.id;
    const title = item.querySelector(".title").textContent;
    try {
      if (button.dataset.action === "rename") {
        const value = await ask({ title: "Rename conversation", label: "Title", value: title, ok: "Rename" });
        if (value === null || !value.trim()) return;
        const updated = await api(`conversations/${id}/`, { method: "PATCH", body: { title: value } });
        setTitle(item, updated.title || "Untitled");
        if (id === this.currentId) this.onChanged(updated);
      } else if (button.dataset.action === "share") {
        openShareDialog({ id, title }, { opener: item.querySelector("summary") });
      } else if (button.dataset.action === "archive") {
        const archive = item.dataset.archived !== "true";
        const updated = await api(`conversations/${id}/`, { method: "PATCH", body: { archived: archive } });
        this.notify(archive ? `Archived “${title}”.` : `Restored “${title}”.`);
        if (!this.search.value.trim()) this.remove(id);
        else setArchived(item, updated.archived);
        if (id === this.currentId) this.onChanged(updated);
      } else if (button.dataset.action === "delete") {
        const sure = await ask({
          title: "Delete conversation?",
          text: `“${title}” and all its messages will be deleted for good. This cannot be undone.`,
          ok: "Delete",
          danger: true,
        });
        if (!sure) return;
        await api(`conversations/${id}/`, { method: "DELETE" });
        this.remove(id);
        this.notify(`Deleted “${title}”.`);
        if (id === this.currentId) this.onDeleted(id);
      } else if (["pin", "tags", "folder"].includes(button.dataset.action)) {
        await this.organiser.act(button.dataset.action, item, title);
      }
    } catch (error) {
      this.notify(error.message);
    }
  }

  remove(id) {
    const item = this.items.get(id);
    if (item) item.remove();
    this.items.delete(id);
    this.organiser.removed(item);
  }
}

function renderItem(conversation, current) {
  const template = document.createElement("template");
  template.innerHTML = `
    <li class="conversation-item">
      <a class="conversation-link"><span class="title"></span></a>
      <details class="item-menu">
        <summary class="icon"><span aria-hidden="true">⋯</span></summary>
        <div class="menu">
          <button type="button" data-action="rename">Rename</button>
          <button type="button" data-action="pin">Pin</button>
          <button type="button" data-action="tags">Tags…</button>
          <button type="button" data-action="folder">Move to folder…</button>
          <button type="button" data-action="share">Share…</button>
          <button type="button" data-action="archive"></button>
          <a data-format="json" download>Export JSON</a>
          <a data-format="markdown" download>Export Markdown</a>
          <a data-format="zip" download>Export ZIP, with files</a>
          <button type="button" data-action="delete" class="danger">Delete</button>
        </div>
      </details>
    </li>`;
  const item = template.content.firstElementChild;
  const title = conversation.title || "Untitled";
  item.dataset.id = conversation.id;
  const link = item.querySelector("a.conversation-link");
  link.href = `/chat/${conversation.id}/`;
  if (current) link.setAttribute("aria-current", "page");
  setTitle(item, title);
  for (const anchor of item.querySelectorAll("a[data-format]")) {
    anchor.href = `/api/v1/conversations/${conversation.id}/export/?format=${anchor.dataset.format}`;
  }
  setArchived(item, Boolean(conversation.archived));
  return item;
}

function setTitle(item, title) {
  item.querySelector(".title").textContent = title;
  item.querySelector("summary").setAttribute("aria-label", `Actions for ${title}`);
}

function setArchived(item, archived) {
  item.dataset.archived = String(archived);
  item.querySelector('[data-action="archive"]').textContent = archived ? "Unarchive" : "Archive";
}

// Search snippets mark matches with **bold**; built as nodes, never as HTML.
function setSnippet(item, snippet) {
  const line = document.createElement("span");
  line.className = "snippet";
  snippet.split("**").forEach((part, index) => {
    if (index % 2) {
      const mark = document.createElement("mark");
      mark.textContent = part;
      line.append(mark);
    } else {
      line.append(part);
    }
  });
  item.querySelector(".conversation-link").append(line);
}
