// Tags: the dialog that edits a conversation's tags (chips to remove, an input that
// suggests the user's tags, Enter adds), the chips a sidebar item shows, and the Tags
// section whose tags narrow the conversation list to one of them.
import { FreshList, collapsible } from "./sections.js";

const CHIPS_SHOWN = 3;
const $ = (id) => document.getElementById(id);

// Names are one tag whatever their case, as the server counts them.
export const sameTag = (a, b) => a.toLowerCase() === b.toLowerCase();

// `tag:name` or `tag:"two words"` in a search: the server narrows the list to that tag.
export function searchNamesTag(q) {
  return /(^|\s)tag:\S/i.test(q);
}

export class TagList {
  // onPick(name or null): the list is to show only that tag's conversations.
  constructor({ onPick }) {
    this.box = $("tag-list");
    this.tags = []; // [{name, count}]
    this.active = null;
    const show = (tags) => {
      this.tags = tags;
      this.render();
    };
    this.fresh = new FreshList("tags/", { show, status: $("tags-status") });
    collapsible($("tags-toggle"), $("tags-body"), "parley.tags.collapsed");
    this.box.addEventListener("click", (event) => {
      const chip = event.target.closest("button[data-tag]");
      if (chip) onPick(this.active && sameTag(this.active, chip.dataset.tag) ? null : chip.dataset.tag);
    });
  }

  names() {
    return this.tags.map((tag) => tag.name);
  }

  load() {
    return this.fresh.load();
  }

  refreshSoon() {
    this.fresh.soon();
  }

  setActive(name) {
    this.active = name;
    this.render();
  }

  render() {
    this.box.replaceChildren(
      ...this.tags.map(({ name, count }) => {
        const chip = tagButton(name, `${count}`);
        chip.setAttribute("aria-pressed", String(Boolean(this.active && sameTag(this.active, name))));
        return chip;
      }),
    );
    $("tags-status").textContent = this.tags.length ? "" : "No tags yet. “Tags…” in a conversation's menu adds some.";
  }
}

function tagButton(name, count = "") {
  const chip = document.createElement("button");
  chip.type = "button";
  chip.className = "tag-chip";
  chip.dataset.tag = name;
  chip.textContent = name;
  chip.title = `Show the conversations tagged “${name}”`;
  if (count) {
    const number = document.createElement("span");
    number.className = "tag-count";
    number.textContent = count;
    chip.append(number);
  }
  return chip;
}

// A sidebar item's tags, compact: the first few as chips, then how many more.
export function tagChips(tags) {
  const nodes = tags.slice(0, CHIPS_SHOWN).map((name) => tagButton(name));
  if (tags.length > CHIPS_SHOWN) {
    const more = document.createElement("span");
    more.className = "tag-more muted";
    more.textContent = `+${tags.length - CHIPS_SHOWN}`;
    more.title = tags.slice(CHIPS_SHOWN).join(", ");
    nodes.push(more);
  }
  return nodes;
}

// The tags dialog. `save(tags)` stores them (a refusal is shown in the dialog, which stays
// open); resolves to true once saved, false when cancelled.
export function editTags({ title, tags, known, save }) {
  const dialog = $("tags-dialog");
  const input = $("tags-input");
  const chosenBox = $("tags-chosen");
  const error = $("tags-error");
  const chosen = [...tags];
  const listening = new AbortController();
  const on = (target, type, handler) => target.addEventListener(type, handler, { signal: listening.signal });
  $("tags-for").textContent = `“${title}”`;
  error.textContent = "";
  input.value = "";

  const draw = () => {
    chosenBox.replaceChildren(
      ...chosen.map((name) => {
        const chip = document.createElement("li");
        chip.className = "tag-chip";
        chip.textContent = name;
        const remove = document.createElement("button");
        remove.type = "button";
        remove.className = "chip-remove";
        remove.dataset.remove = name;
        remove.setAttribute("aria-label", `Remove tag ${name}`);
        remove.textContent = "×";
        chip.append(remove);
        return chip;
      }),
    );
    $("tags-none").hidden = chosen.length > 0;
    $("tags-suggestions").replaceChildren(
      ...known
        .filter((name) => !chosen.some((other) => sameTag(other, name)))
        .map((name) => Object.assign(document.createElement("option"), { value: name })),
    );
  };
  // The typed name joins the chips (once, whatever its case); false when nothing was typed.
  const addTyped = () => {
    const name = input.value.trim();
    if (!name) return false;
    if (!chosen.some((other) => sameTag(other, name))) chosen.push(name);
    input.value = "";
    error.textContent = "";
    draw();
    return true;
  };

  on(input, "keydown", (event) => {
    if ((event.key === "Enter" || event.key === ",") && !event.isComposing) {
      // Enter in an empty box saves, as in any form (its default button would be Cancel).
      event.preventDefault();
      if (!addTyped() && event.key === "Enter") $("tags-save").click();
    } else if (event.key === "Backspace" && !input.value && chosen.length) {
      chosen.pop();
      draw();
    }
  });
  on(chosenBox, "click", (event) => {
    const remove = event.target.closest("button[data-remove]");
    if (!remove) return;
    chosen.splice(chosen.indexOf(remove.dataset.remove), 1);
    draw();
    input.focus();
  });
  draw();

  return new Promise((resolve) => {
    let saved = false;
    on($("tags-form"), "submit", async (event) => {
      if (!event.submitter || event.submitter.value !== "save") return; // Cancel closes it
      event.preventDefault();
      addTyped();
      const button = $("tags-save");
      button.disabled = true;
      try {
        await save(chosen);
        saved = true;
        dialog.close("saved");
      } catch (problem) {
        error.textContent = problemWords(problem, chosen);
        input.focus();
      } finally {
        button.disabled = false;
      }
    });
    dialog.addEventListener(
      "close",
      () => {
        listening.abort();
        resolve(saved);
      },
      { once: true },
    );
    dialog.showModal();
    input.focus();
  });
}

// A refusal in words, each problem naming the tag it is about ("“x…”: at most 64 characters").
function problemWords(error, chosen) {
  const problems = (error.details && error.details.problems) || [];
  if (!problems.length) return error.message;
  return problems
    .map(({ path, message }) => {
      const index = (/^\$\.tags\[(\d+)\]/.exec(path) || [])[1];
      const name = index === undefined ? "" : chosen[Number(index)] || "";
      const shown = name.length > 24 ? `${name.slice(0, 24)}…` : name;
      return name ? `“${shown}”: ${message}.` : `Tags: ${message}.`;
    })
    .join(" ");
}
