// The message list. Every element is keyed by message id (tool cards by call id), so a
// message that arrives twice — from history and from a replayed run, or from two
// notifications — is drawn once, in place. An assistant's messages of one reply are
// parts of one turn (see turns.js).
import { showAttachments } from "./files.js";
import { renderMarkdown } from "./markdown.js";
import { storedThoughts, thoughtsBox, thoughtsLabel } from "./thoughts.js";
import { buildToolCard, showToolResult } from "./tool_cards.js";
import { addPart, adoptCard, joinAcrossPage, markVersions, newPart, settleTurn, turnFor, withActions } from "./turns.js";

const ROLE_LABEL = { user: "You", assistant: "Parley", tool: "Tool", system: "Note" };
// A shared page's reader did not ask the questions.
const READER_LABEL = { ...ROLE_LABEL, user: "User" };

export class Transcript {
  // `readOnly`: a shared page's transcript, whose messages can only be copied.
  constructor(container, { readOnly = false } = {}) {
    this.container = container;
    this.readOnly = readOnly;
    this.top = container.querySelector("#history-top");
    this.empty = container.querySelector("#empty");
    this.byId = new Map();
    this.cards = new Map();
    this.streams = new Map(); // message id -> {element, target, shown, done}
    this.raw = new WeakMap(); // element -> the message's text as written (for Copy)
    this.oldestSeq = null;
    this.newestSeq = 0;
    this.ticking = false;
  }

  // --- stored messages ------------------------------------------------------------------

  // Draw a stored message (from history, a notification or message.completed).
  addStored(message, { prepend = false } = {}) {
    this.empty.hidden = true;
    if (message.seq) {
      this.newestSeq = Math.max(this.newestSeq, message.seq);
      if (this.oldestSeq === null || message.seq < this.oldestSeq) this.oldestSeq = message.seq;
    }
    if (message.role === "tool") {
      const card = this.toolResult(message.tool_call_id, message.name, message.content,
        Boolean(message.provider_payload && message.provider_payload.is_error),
        { prepend, files: message.attachments || [] });
      stamp(card, message);
      return;
    }
    let element = this.byId.get(message.id);
    if (!element && message.role === "user") element = this.adoptPending(message);
    if (!element && message.role === "assistant") element = this.part(message.id, prepend);
    if (!element) {
      element = this.create(message.role, message.kind, message.id);
      this.place(element, prepend);
    }
    stamp(element, message);
    this.raw.set(element, message.content);
    if (message.role === "assistant") {
      storedThoughts(element, message);
      const stream = this.streams.get(message.id);
      if (stream) {
        // Let the smooth reveal finish on the stored text, which is the truth.
        stream.target = message.content;
        stream.done = true;
        this.tick();
      } else {
        element.querySelector(".content").innerHTML = renderMarkdown(message.content);
      }
      if (message.provider_payload && message.provider_payload.finish_reason === "cancelled") {
        element.classList.add("stopped");
      }
      if (message.provider_payload && message.provider_payload.finish_reason === "length") {
        this.markCutShort(element);
      }
      for (const call of message.tool_calls || []) {
        this.toolCard(message.id, call.id, call.name);
        this.toolArguments(call.id, call.arguments, { complete: true });
      }
    } else {
      this.setPlain(element, message);
    }
    showAttachments(element, message.attachments);
  }

  // A message entry: the role, then (except for an assistant turn, whose parts hold the
  // text) the content, then the message's actions.
  create(role, kind, id) {
    const element = document.createElement("article");
    element.className = `message ${role}${kind && kind !== "message" ? ` ${kind}` : ""}`;
    if (id) {
      element.dataset.id = id;
      this.byId.set(id, element);
    }
    const label = document.createElement("div");
    label.className = "role";
    label.textContent = (this.readOnly ? READER_LABEL : ROLE_LABEL)[role] || role;
    element.append(label);
    if (role !== "assistant") {
      const content = document.createElement("div");
      content.className = "content";
      element.append(content);
    }
    return withActions(element, { readOnly: this.readOnly });
  }

  // An assistant message: a new part at the end of the last turn, or of a new one.
  part(id, prepend = false) {
    const part = newPart(id);
    if (id) this.byId.set(id, part);
    const holder = prepend ? this.batch : this.container;
    addPart(turnFor(holder, this.top, () => this.create("assistant", "message", null)), part);
    return part;
  }

  setPlain(element, message) {
    const content = element.querySelector(".content");
    if (message.kind === "draft_edit") {
      element.querySelector(".role").textContent = "Draft";
      content.textContent = "You edited the draft; Parley was told.";
      element.title = message.content;
    } else if (message.kind === "event") {
      element.querySelector(".role").textContent = "Context";
      content.textContent = message.content;
    } else if (message.kind === "compaction") {
      // The model reads this summary instead of the turns before it; they stay shown.
      element.querySelector(".role").textContent = "Summary";
      const details = document.createElement("details");
      const summary = document.createElement("summary");
      summary.textContent = "Earlier turns summarised for the model";
      const text = document.createElement("div");
      text.className = "compaction-text";
      text.textContent = message.content;
      details.append(summary, text);
      content.replaceChildren(details);
    } else {
      content.textContent = message.content;
    }
  }

  place(element, prepend) {
    if (prepend) this.batch.append(element);
    else this.container.append(element);
  }

  // An older page goes above what is shown, in order, without moving the reader's view.
  prependPage(messages) {
    const before = this.container.scrollHeight;
    this.batch = document.createDocumentFragment();
    for (const message of messages) this.addStored(message, { prepend: true });
    const last = this.batch.lastElementChild;
    this.top.after(this.batch);
    let next = last && last.nextElementSibling;
    if (next === this.empty) next = next.nextElementSibling;
    joinAcrossPage(last, next);
    this.container.scrollTop += this.container.scrollHeight - before;
  }

  // Another conversation is opened: the list starts empty.
  reset() {
    for (const child of [...this.container.children]) {
      if (child !== this.top && child !== this.empty) child.remove();
    }
    this.empty.hidden = false;
    this.byId.clear();
    this.cards.clear();
    this.streams.clear();
    this.raw = new WeakMap();
    this.oldestSeq = null;
    this.newestSeq = 0;
  }

  // What an entry's Copy button copies: the text as written (a reply's Markdown source;
  // a turn's parts, one paragraph each), a reply still streaming as far as it has come.
  textOf(article) {
    if (!article.classList.contains("assistant")) {
      return this.raw.get(article) ?? article.dataset.pending ?? "";
    }
    const texts = [...article.querySelectorAll(".part")].map((part) => {
      const stream = part.dataset.id && this.streams.get(part.dataset.id);
      return stream ? stream.target : this.raw.get(part) || "";
    });
    return texts.filter((text) => text.trim()).join("\n\n");
  }

  // --- the user's own message before the server has stored it ---------------------------

  addPending(content) {
    this.empty.hidden = true;
    const element = this.create("user", "message", null);
    element.classList.add("pending");
    element.dataset.pending = content;
    this.raw.set(element, content);
    element.querySelector(".content").textContent = content;
    this.container.append(element);
    return element;
  }

  adoptPending(message) {
    for (const element of this.container.querySelectorAll("article[data-pending]")) {
      if (element.dataset.pending === message.content) {
        delete element.dataset.pending;
        element.classList.remove("pending");
        element.dataset.id = message.id;
        this.byId.set(message.id, element);
        return element;
      }
    }
    return null;
  }

  // --- streaming --------------------------------------------------------------------------

  streamStart(messageId) {
    this.empty.hidden = true;
    const element = this.byId.get(messageId) || this.part(messageId);
    element.classList.add("streaming");
    element.closest("article").classList.add("streaming");
    // A retried step announces the same message again: its text starts afresh.
    const stream = { element, target: "", shown: 0, done: false, thinkingSince: null };
    this.streams.set(messageId, stream);
    element.querySelector(".content").innerHTML = "";
    const thoughts = element.querySelector("details.reasoning");
    if (thoughts) thoughts.remove();
    return element;
  }

  streamDelta(messageId, delta) {
    if (!this.streams.has(messageId)) this.streamStart(messageId);
    const stream = this.streams.get(messageId);
    if (stream.thinkingSince !== null) {
      // The answer has begun: the thinking is over. The stored message brings the
      // server's own measure when it is saved.
      thoughtsLabel(stream.element, performance.now() - stream.thinkingSince);
      stream.thinkingSince = null;
    }
    stream.target += delta;
    this.tick();
  }

  // --- a reasoning model's thoughts --------------------------------------------------------
  // Collapsed above the answer: "Thinking…" while the model thinks (so a long pause before
  // the answer reads as thinking, not as a stalled reply), then "Thought for 4 s". Opening
  // it shows the thoughts, live as they stream and from the stored message after a reload.
  // Plain text, never rendered as markup.

  reasoningDelta(messageId, delta) {
    if (!this.streams.has(messageId)) this.streamStart(messageId);
    const stream = this.streams.get(messageId);
    const box = thoughtsBox(stream.element);
    if (stream.thinkingSince === null && !box.dataset.done) {
      stream.thinkingSince = performance.now();
      box.classList.add("thinking");
      box.querySelector("summary").textContent = "Thinking…";
    }
    const stick = this.nearBottom();
    box.querySelector(".reasoning-text").textContent += delta;
    if (stick) this.scrollToBottom();
  }

  // The run ended without storing this message (failure): keep the text, say so.
  streamAbandon(note) {
    for (const [id, stream] of this.streams) {
      if (!stream.done) {
        stream.done = true;
        stream.element.classList.add("unsaved");
        stream.element.title = note;
      }
      stream.element.classList.remove("streaming");
      settleTurn(stream.element);
      this.raw.set(stream.element, stream.target);
      this.streams.delete(id);
      stream.shown = stream.target.length;
      this.paint(stream);
    }
  }

  // Deltas arrive in bursts (the server merges them); the text is revealed a little per
  // frame so it reads as a steady stream. A large backlog (a replay) appears at once.
  tick() {
    if (this.ticking) return;
    this.ticking = true;
    requestAnimationFrame(() => {
      this.ticking = false;
      let pending = false;
      for (const [id, stream] of this.streams) {
        const backlog = stream.target.length - stream.shown;
        if (backlog > 0) {
          stream.shown += backlog > 400 ? backlog : Math.max(2, Math.ceil(backlog / 6));
          stream.shown = Math.min(stream.shown, stream.target.length);
          this.paint(stream);
        } else if (backlog < 0) {
          stream.shown = stream.target.length;
          this.paint(stream);
        }
        if (stream.shown < stream.target.length) pending = true;
        else if (stream.done) {
          stream.element.classList.remove("streaming");
          settleTurn(stream.element);
          this.streams.delete(id);
        }
      }
      if (pending) this.tick();
    });
  }

  paint(stream) {
    const stick = this.nearBottom();
    stream.element.querySelector(".content").innerHTML = renderMarkdown(
      stream.target.slice(0, stream.shown),
    );
    if (stick) this.scrollToBottom();
  }

  streaming() {
    return this.streams.size > 0;
  }

  // --- tool cards -------------------------------------------------------------------------

  toolCard(messageId, callId, name) {
    const owner = this.byId.get(messageId) || this.part(messageId);
    const existing = this.cards.get(callId);
    if (existing) {
      adoptCard(existing, owner);
      return existing;
    }
    const card = this.buildCard(callId, name);
    owner.querySelector(".tool-cards").append(card);
    return card;
  }

  buildCard(callId, name) {
    const card = buildToolCard(callId, name);
    this.cards.set(callId, card);
    return card;
  }

  toolArguments(callId, text, { complete = false } = {}) {
    const card = this.cards.get(callId);
    if (!card) return;
    const pre = card.querySelector(".tool-args");
    if (!complete) {
      pre.textContent += text;
      return;
    }
    try {
      pre.textContent = JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      pre.textContent = text; // kept verbatim: the model may send invalid JSON
    }
  }

  // `files`: the images the tool returned, kept with its result (undefined: unknown yet).
  toolResult(callId, name, output, isError, { prepend = false, files } = {}) {
    let card = this.cards.get(callId);
    if (!card) {
      // Its call is on an older page of history: show the result on its own.
      const holder = this.part(null, prepend);
      card = this.buildCard(callId, name || "tool");
      holder.querySelector(".tool-cards").append(card);
      card.querySelector(".tool-args").textContent = "(earlier)";
    }
    showToolResult(card, output, isError, files);
    return card;
  }

  // A reply that reached its token limit says so on itself, also after a reload (the run's
  // own note, with the limit, is shown only live).
  markCutShort(element) {
    element.classList.add("cut-short");
    if (element.querySelector(".reply-note")) return;
    const note = document.createElement("p");
    note.className = "reply-note small";
    note.textContent = "Cut short: this reply reached its output token limit.";
    element.append(note);
  }

  // --- small notes (draft changes by the assistant, run outcomes) ----------------------------

  note(text, kind = "info") {
    const element = document.createElement("p");
    element.className = `note ${kind}`;
    element.textContent = text;
    this.container.append(element);
    if (this.nearBottom(200)) this.scrollToBottom();
  }

  // --- scrolling --------------------------------------------------------------------------

  nearBottom(slack = 80) {
    const c = this.container;
    return c.scrollHeight - c.scrollTop - c.clientHeight < slack;
  }

  scrollToBottom() {
    this.container.scrollTop = this.container.scrollHeight;
  }
}

// Where a stored message sits (for "Fork to new chat"): its seq, and its branch when the
// server says (older servers do not).
function stamp(element, message) {
  element.dataset.seq = message.seq || "";
  if (typeof message.branch_id === "string" && message.branch_id) {
    element.dataset.branchId = message.branch_id;
  }
  markVersions(element, message); // ‹ k/n › where the message has other versions
}
