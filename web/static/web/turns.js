// An assistant turn: everything Parley wrote for one user message — the messages that
// called tools, the tools' results and the final answer — drawn as one block. Each
// assistant message is a `.part` of its turn (keyed by message id); a tool result lives on
// its call's card. Consecutive assistant and tool messages with no user (or other)
// message between them belong to the same turn, live and from history alike.
import { actionBar } from "./actions.js";

export { markVersions } from "./versions.js";

// The last message element of `holder` (the list, or a page of history being built),
// skipping small notes ("Parley updated the draft.") drawn between a turn's parts.
function lastArticle(holder, stop) {
  let element = holder.lastElementChild;
  while (element && element !== stop && element.tagName !== "ARTICLE") {
    element = element.previousElementSibling;
  }
  return element && element.tagName === "ARTICLE" ? element : null;
}

// The turn a new assistant part joins: the last one shown, or a new one.
export function turnFor(holder, stop, create) {
  const last = lastArticle(holder, stop);
  if (last && last.classList.contains("assistant")) return last;
  const turn = create();
  holder.append(turn);
  return turn;
}

export function newPart(id) {
  const part = document.createElement("div");
  part.className = "part";
  if (id) part.dataset.id = id;
  const content = document.createElement("div");
  content.className = "content markdown";
  const cards = document.createElement("div");
  cards.className = "tool-cards";
  part.append(content, cards);
  return part;
}

// Parts go before the turn's ‹ k/n › (versions.js) and its actions.
export function addPart(turn, part) {
  (turn.querySelector(":scope > .versions") || turn.querySelector(".message-actions")).before(part);
}

// A turn cut in two by a page boundary (its first messages on the older page) is one
// turn again once the older page is shown.
export function joinAcrossPage(earlier, later) {
  if (!earlier || !later || earlier.tagName !== "ARTICLE" || later.tagName !== "ARTICLE") return;
  if (!earlier.classList.contains("assistant") || !later.classList.contains("assistant")) return;
  for (const part of later.querySelectorAll(":scope > .part")) addPart(earlier, part);
  if (later.classList.contains("streaming")) earlier.classList.add("streaming");
  later.remove();
}

// A part's streaming cursor went away: the turn streams while any of its parts does.
export function settleTurn(part) {
  const turn = part.closest("article");
  if (turn && !turn.querySelector(".part.streaming")) turn.classList.remove("streaming");
}

// A card shown on its own (its call was on an older page) moves to its call's part.
export function adoptCard(card, owner) {
  const holder = card.closest(".part");
  if (!holder || holder.dataset.id || holder === owner) return;
  owner.querySelector(".tool-cards").append(card);
  if (holder.querySelector(".tool-card")) return;
  const turn = holder.closest("article");
  holder.remove();
  if (turn && !turn.querySelector(".part")) turn.remove();
}

export function withActions(article, options = {}) {
  article.append(actionBar(article, options));
  return article;
}
