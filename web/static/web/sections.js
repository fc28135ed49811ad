// What the sidebar's parts share: a section that folds away (its state kept in the
// browser across visits), the ⋯ menus (<details>) that close on a click elsewhere or on
// Escape, giving the focus back to their button, and a short list kept fresh.
import { apiAll } from "./api.js";

// A short list read whole from the API (folders, tags): the latest answer wins, and a
// burst of changes asks once. `show(items)` draws it; a failure is said in `status`.
export class FreshList {
  constructor(path, { show, status }) {
    Object.assign(this, { path, show, status });
    this.generation = 0;
    this.timer = null;
  }

  // Resolves once the newest read is drawn: a caller about to use the list (the tags
  // dialog's suggestions) never gets an answer a later read overtook.
  load() {
    clearTimeout(this.timer);
    const generation = ++this.generation;
    this.latest = this.read(generation);
    return this.latest;
  }

  async read(generation) {
    try {
      const items = await apiAll(this.path);
      if (generation === this.generation) this.show(items);
      else await this.latest;
    } catch (error) {
      if (generation === this.generation) this.status.textContent = error.message;
    }
  }

  soon() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.load(), 300);
  }
}

// `toggle` is the section's button (aria-expanded), `body` what it shows or hides.
export function collapsible(toggle, body, storageKey) {
  const set = (open) => {
    toggle.setAttribute("aria-expanded", String(open));
    body.hidden = !open;
  };
  set(stored(storageKey) !== "collapsed");
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    set(open);
    store(storageKey, open ? "open" : "collapsed");
  });
  return { open: () => set(true), isOpen: () => toggle.getAttribute("aria-expanded") === "true" };
}

// One open menu at a time inside `container`; a click elsewhere closes it.
export function closingMenus(container) {
  document.addEventListener("click", (event) => {
    for (const menu of container.querySelectorAll("details[open]")) {
      if (!menu.contains(event.target)) menu.open = false;
    }
  });
  container.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    const menu = event.target.closest("details[open]");
    if (menu) {
      menu.open = false;
      menu.querySelector("summary").focus();
    }
  });
}

// Storage can be refused (private windows, policies): the section then just starts open.
function stored(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}

function store(key, value) {
  try {
    localStorage.setItem(key, value);
  } catch {
    // Remembered for this page only.
  }
}
