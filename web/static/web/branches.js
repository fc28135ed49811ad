// Which branch of the conversation the page shows, and showing another one in place.
//
// A conversation is a tree of branches; the page shows one branch's path (the
// conversation's `active_branch_id`). Another branch comes to be shown when this tab edits a
// question or regenerates a reply (editing.js), when the reader picks another version with
// ‹ k/n ›, and when another tab or the API does one of those (`conversation.updated` with an
// `active_branch_id`). Either way the same thing happens: the entries both paths share stay
// where they are, the rest go, and the new path's messages from there on are read with
// `messages/?branch_id=` (the branch list says where the paths part). Socket frames that
// arrive meanwhile wait and are handled afterwards, in order, so a reply starting on the new
// branch streams into the new path.
//
// A version whose reply failed or was stopped before a word has no message where the reply
// would be, so no ‹ k/n › either: the page then works the choices out from the branch list
// and offers them in the reply's place.
import { api, isRunActive } from "./api.js";
import { fillVersions, isBusy, syncVersions, versionsBox } from "./versions.js";
import { clearProblem, showProblem } from "./problems.js";

const PAGE = 50; // the newest messages shown when a whole path is drawn afresh
const MAX_PAGE = 200; // the API's largest page

export class Branches {
  // `state.conversation` is the open conversation; `replay(frame)` handles a socket frame
  // held while a path was being drawn; `flash(text)` says something under the composer.
  constructor(container, { transcript, state, replay, flash }) {
    this.container = container;
    this.transcript = transcript;
    this.state = state;
    this.replay = replay;
    this.flash = flash;
    this.shown = null; // the branch whose path is drawn
    this.target = null; // the branch to draw (differs from `shown` while drawing)
    this.queue = null; // frames held while drawing
    this.drawing = null;
    this.generation = 0; // a new conversation drops what an older drawing would do
    container.addEventListener("click", (event) => {
      const button = event.target.closest(".versions button.version-step");
      if (!button || button.disabled || !button.dataset.branchId) return;
      this.switchTo(button.dataset.branchId, button.closest("article, .missing-reply"));
    });
    // The page marks the list busy while a reply runs: switchers follow, and once it ends
    // a version left without a reply offers the others.
    new MutationObserver(() => {
      syncVersions(container);
      if (isBusy()) this.removeMissing();
      else this.checkMissing();
    }).observe(container, { attributes: true, attributeFilter: ["aria-busy"] });
  }

  // Another conversation (or none) is open.
  reset(branchId = null) {
    this.generation += 1;
    this.shown = branchId || null;
    this.target = this.shown;
    this.queue = null;
    this.drawing = null;
  }

  // The newest page of the active branch's path, for opening a conversation. Its
  // `message_count` counts every branch's messages; the path's length is the branch's.
  async open(detail) {
    this.reset(detail.active_branch_id);
    let length = detail.message_count;
    if (detail.branch_count > 1 && this.shown) {
      const row = (await this.tree(detail.id)).get(this.shown);
      if (row) length = row.message_count;
    }
    const after = Math.max(0, length - PAGE);
    const page = await api(`conversations/${detail.id}/messages/?after=${after}&limit=${PAGE}${this.query()}`);
    setTimeout(() => this.checkMissing(), 0); // after the page is drawn
    return page;
  }

  // For reading the shown path's messages: `&branch_id=…`.
  query() {
    return this.shown ? `&branch_id=${encodeURIComponent(this.shown)}` : "";
  }

  // A stored message belongs on the page when it is on the shown branch (new messages are
  // always written at the tip of the branch shown).
  accepts(message) {
    return !message || !message.branch_id || !this.shown || message.branch_id === this.shown;
  }

  // A frame arriving while a path is drawn waits (true), to be handled after it.
  hold(frame) {
    if (!this.queue) return false;
    this.queue.push(frame);
    return true;
  }

  // The conversation now shows `branchId` (said by the socket or an answer of the API).
  follow(branchId, options = {}) {
    if (!branchId || branchId === this.target) return this.drawing || Promise.resolve();
    return this.show(branchId, options);
  }

  // After a reconnect: another tab may have switched while this one was not listening.
  async recheck(conversationId) {
    try {
      const detail = await api(`conversations/${conversationId}/`);
      const conversation = this.state.conversation;
      if (conversation && conversation.id === conversationId) this.follow(detail.active_branch_id);
    } catch {
      // The next reconnect looks again.
    }
  }

  // The reader picked another version: shown here once the server has made it active (so
  // a reload and the other tabs show it too).
  async switchTo(branchId, holder) {
    const conversation = this.state.conversation;
    if (!conversation || isBusy()) return;
    clearProblem(holder);
    const { generation } = this;
    const before = this.target;
    this.target = branchId; // the notification this switch causes is then no news
    try {
      await api(`conversations/${conversation.id}/`, { method: "PATCH", body: { active_branch_id: branchId } });
    } catch (error) {
      if (generation !== this.generation) return;
      if (this.target === branchId) this.target = before;
      showProblem(
        holder,
        isRunActive(error)
          ? "A reply is running: wait for it to finish (or press Stop), then switch versions."
          : `Cannot show that version: ${error.message}`,
      );
      return;
    }
    if (generation !== this.generation) return;
    this.state.conversation.active_branch_id = branchId;
    this.target = before;
    await this.show(branchId, { anchor: holder });
  }

  // Draw `branchId`'s path. Options: `anchor`, an entry whose place on the screen the new
  // version takes; `bottom`, scroll to the end (an edit, a regeneration).
  show(branchId, options = {}) {
    this.target = branchId;
    if (!this.drawing) {
      const drawing = this.drawAll(options);
      this.drawing = drawing;
      drawing.finally(() => {
        if (this.drawing === drawing) this.drawing = null;
      });
    }
    return this.drawing;
  }

  async drawAll(options) {
    const generation = this.generation;
    this.queue = this.queue || [];
    try {
      while (this.target && this.target !== this.shown) {
        const branchId = this.target;
        await this.draw(branchId, options, generation);
        if (generation !== this.generation) return;
        this.shown = branchId;
        options = {}; // a switch made meanwhile elsewhere is drawn plainly
      }
    } catch (error) {
      if (generation !== this.generation) return;
      this.target = this.shown;
      this.flash(`Could not show the other version: ${error.message}`);
    } finally {
      if (generation === this.generation) {
        const frames = this.queue || [];
        this.queue = null;
        for (const frame of frames) this.replay(frame);
        this.checkMissing();
      }
    }
  }

  async draw(branchId, { anchor = null, bottom = false }, generation) {
    const conversation = this.state.conversation;
    if (!conversation) return;
    const tree = await this.tree(conversation.id);
    if (generation !== this.generation) return;
    const row = tree.get(branchId);
    if (!row) throw new Error("that version is not in this conversation.");
    // The entries of the shown path up to where the two paths part stay.
    const common = this.shown && tree.has(this.shown) ? commonLength(tree, this.shown, branchId) : 0;
    const articles = [...this.container.children].filter((element) => element.tagName === "ARTICLE");
    const cut = articles.find((article) => {
      const seqs = stampedSeqs(article);
      return !seqs.length || Math.max(...seqs) > common;
    });
    const kept = cut ? articles.slice(0, articles.indexOf(cut)) : articles;
    const shownSeqs = articles.flatMap(stampedSeqs);
    let from = kept.length ? Math.max(0, ...kept.flatMap(stampedSeqs)) : Math.min(common, ...shownSeqs.map((s) => s - 1));
    let afresh = !kept.length;
    if (row.message_count - from > MAX_PAGE) {
      // Far apart: the newest page of the new path, as when a conversation opens.
      from = Math.max(0, row.message_count - PAGE);
      afresh = true;
    }
    const messages = await this.path(conversation.id, branchId, from, row.message_count);
    if (generation !== this.generation) return;

    const anchorSeq = anchor && anchor.isConnected ? minSeq(anchor) : Infinity;
    const placed = Number.isFinite(anchorSeq) ? { seq: anchorSeq, top: anchor.getBoundingClientRect().top } : null;
    const stick = this.transcript.nearBottom(120);
    this.removeMissing();
    if (afresh) this.transcript.reset();
    else if (cut) cutFrom(this.transcript, cut);
    for (const message of messages) this.transcript.addStored(message);
    if (bottom || (!placed && stick)) {
      this.transcript.scrollToBottom();
    } else if (placed) {
      const same = [...this.container.querySelectorAll(":scope > article")].find(
        (article) => minSeq(article) >= placed.seq,
      );
      if (same) this.container.scrollTop += same.getBoundingClientRect().top - placed.top;
    }
  }

  // Messages `from + 1 .. length` of a branch's path.
  async path(conversationId, branchId, from, length) {
    const messages = [];
    let url = `conversations/${conversationId}/messages/?after=${from}&limit=${MAX_PAGE}&branch_id=${encodeURIComponent(branchId)}`;
    for (let pages = 0; url && pages < Math.ceil((length - from) / MAX_PAGE) + 1; pages += 1) {
      const page = await api(url);
      messages.push(...page.results);
      url = page.next;
    }
    return messages;
  }

  // Every branch of the conversation: id -> {id, parent_id, fork_seq, message_count, created_at}.
  async tree(conversationId) {
    const rows = new Map();
    let url = `conversations/${conversationId}/branches/?limit=${MAX_PAGE}`;
    while (url) {
      const page = await api(url);
      for (const row of page.results) rows.set(row.id, row);
      url = page.next;
    }
    return rows;
  }

  // --- a version without a reply ---------------------------------------------------------

  async checkMissing() {
    const conversation = this.state.conversation;
    if (!conversation || !this.shown || isBusy() || this.queue || this.checking) return;
    const last = lastStored(this.container);
    if (!last || !last.matches(".message.user")) {
      this.removeMissing();
      return;
    }
    if (this.container.querySelector(":scope > .missing-reply")) return;
    const { generation, shown } = this;
    this.checking = true;
    try {
      const choices = emptyChoices(await this.tree(conversation.id), shown, Number(last.dataset.seq));
      if (!choices || generation !== this.generation || shown !== this.shown || isBusy()) return;
      if (lastStored(this.container) !== last) return;
      const holder = document.createElement("div");
      holder.className = "missing-reply";
      holder.innerHTML = '<p class="small muted">No reply on this version.</p>';
      const box = versionsBox();
      holder.append(box);
      this.container.append(holder);
      fillVersions(box, choices);
    } catch {
      // Only a convenience: the page works without it.
    } finally {
      this.checking = false;
    }
  }

  removeMissing() {
    for (const holder of this.container.querySelectorAll(":scope > .missing-reply")) holder.remove();
  }
}

// --- paths as the branch list describes them -------------------------------------------------

// A branch's path as segments, root first: [{id, from, to}] (seqs from..to are that
// branch's own messages; a branch forked at f owns f+1 on).
function segments(tree, branchId) {
  const list = [];
  let row = tree.get(branchId);
  let end = row ? row.message_count : 0;
  while (row) {
    list.unshift({ id: row.id, from: row.fork_seq + 1, to: end });
    end = row.fork_seq;
    row = row.parent_id ? tree.get(row.parent_id) : null;
  }
  return list;
}

// How many messages two branches' paths share.
export function commonLength(tree, a, b) {
  const p = segments(tree, a);
  const q = segments(tree, b);
  let common = 0;
  for (let i = 0; i < p.length && i < q.length && p[i].id === q[i].id; i += 1) {
    common = Math.min(p[i].to, q[i].to);
    if (p[i].to !== q[i].to) break;
  }
  return common;
}

// The versions at the end of a path that stops right after a question (a regeneration
// that wrote nothing), as the server would list them in `alternatives`: the parent's own
// message there, then every branch forked there that holds one (and this one), oldest first.
function emptyChoices(tree, shown, lastSeq) {
  const row = tree.get(shown);
  if (!row || !row.parent_id || row.message_count !== row.fork_seq || row.fork_seq !== lastSeq) return null;
  const fork = row.fork_seq;
  const ids = [...tree.values()]
    .filter((r) => r.parent_id === row.parent_id && r.fork_seq === fork && (r.message_count > fork || r.id === shown))
    .sort((x, y) => Date.parse(x.created_at) - Date.parse(y.created_at) || (x.id < y.id ? -1 : 1))
    .map((r) => r.id);
  const parent = tree.get(row.parent_id);
  if (parent && parent.message_count > fork) ids.unshift(parent.id);
  return ids.length > 1 ? { index: ids.indexOf(shown), count: ids.length, branch_ids: ids } : null;
}

// --- the transcript's entries ----------------------------------------------------------------

// The seqs of the stored messages an entry shows (a turn shows several).
function stampedSeqs(element) {
  return [element, ...element.querySelectorAll("[data-seq]")]
    .map((e) => Number(e.dataset.seq))
    .filter((seq) => seq > 0);
}

// The last entry showing a stored message (a reply that failed before a word is not one).
function lastStored(container) {
  const articles = [...container.querySelectorAll(":scope > article")];
  return articles.reverse().find((article) => stampedSeqs(article).length) || null;
}

function minSeq(element) {
  const seqs = stampedSeqs(element);
  return seqs.length ? Math.min(...seqs) : Infinity;
}

// Remove `first` and everything after it, and forget what was removed.
function cutFrom(transcript, first) {
  for (let node = first; node; ) {
    const next = node.nextElementSibling;
    node.remove();
    node = next;
  }
  for (const map of [transcript.byId, transcript.cards]) {
    for (const [key, element] of map) if (!element.isConnected) map.delete(key);
  }
  for (const [key, stream] of transcript.streams) if (!stream.element.isConnected) transcript.streams.delete(key);
  const seqs = stampedSeqs(transcript.container);
  transcript.newestSeq = seqs.length ? Math.max(...seqs) : 0;
  transcript.oldestSeq = seqs.length ? Math.min(...seqs) : null;
  if (!transcript.container.querySelector(":scope > article")) transcript.empty.hidden = false;
}

