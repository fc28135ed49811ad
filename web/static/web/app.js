// The chat page: wires the sidebar, the transcript, the composer, the draft panel and the
// conversation websocket together. All state changes go through the REST API or the
// socket; the server's run events are the single source of what the reply says.
// Opening another conversation (the sidebar, New chat, back and forward, a fork, an import)
// happens in place: the page stays, its parts are emptied and filled again.
import { MessageActions } from "./actions.js";
import { api, isRunActive } from "./api.js";
import { Branches } from "./branches.js";
import { DraftPanel } from "./draft.js";
import { Editing } from "./editing.js";
import { runEventHandler } from "./events.js";
import { Importer } from "./importer.js";
import { Navigation } from "./navigation.js";
import { setSidebar, setUpPanels } from "./panels.js";
import { editSettings } from "./settings.js";
import { openShareDialog } from "./shares.js";
import { Sidebar } from "./sidebar.js";
import { ConversationSocket } from "./socket.js";
import { CREDENTIAL_WANTED } from "./tool_cards.js";
import { Transcript } from "./transcript.js";
import { ComposerFiles } from "./uploads.js";

const config = JSON.parse(document.getElementById("parley-config").textContent);
const HISTORY_PAGE = 50;
const CONNECTION_TEXT = {
  idle: "",
  connecting: "Connecting…",
  reconnecting: "Reconnecting…",
  online: "Live",
  offline: "Offline — retrying",
  gone: "Deleted",
  "signed-out": "Signed out",
};

const $ = (id) => document.getElementById(id);
const messagesBox = $("messages");
const input = $("composer-input");
const sendButton = $("send");
const stopButton = $("stop");
const composerStatus = $("composer-status");

const state = {
  conversation: null,
  activeRun: null, // {id, status}
  cursors: new Map(), // run id -> last sequence number handled
  ended: new Set(), // runs whose terminal event was handled
  socket: null,
  loadingOlder: false,
  creating: null,
  opening: null,
  shown: 0, // which opening is current: answers for an earlier one are dropped
};

const transcript = new Transcript(messagesBox);
const files = new ComposerFiles(config, { onChange: () => updateComposer() });
const draft = new DraftPanel({ ensureConversation: () => ensureConversation() });
const sidebar = new Sidebar({
  currentId: config.conversationId,
  notify: (text) => flash(text),
  onChanged: (conversation) => setConversation(conversation),
  onDeleted: () => navigation.go(null),
});
const navigation = new Navigation({ load: (id) => show(id) });
const handleRunEvent = runEventHandler({ state, transcript, draft, setActiveRun });
// A fork or an imported conversation opens like any other, and is listed first.
const openNew = (conversation) => {
  sidebar.touch(conversation);
  navigation.go(conversation.id);
};
new MessageActions(messagesBox, { transcript, conversation: () => state.conversation, onForked: openNew });
// Edits, regenerations and ‹ k/n › show another branch's path in place (branches.js).
const branches = new Branches(messagesBox, { transcript, state, replay: (frame) => handleFrame(frame), flash });
new Editing(messagesBox, { transcript, branches, state, setActiveRun, maxChars: config.maxMessageChars });
new Importer({ onImported: openNew, onReport: () => sidebar.reload() });

// --- connection indicator ------------------------------------------------------------------

function showConnection(status, delay) {
  const element = $("connection");
  element.dataset.state = status;
  element.textContent =
    status === "offline" && delay ? `Offline — retrying in ${Math.ceil(delay / 1000)} s` : CONNECTION_TEXT[status];
  updateComposer();
}

function flash(text) {
  composerStatus.textContent = text;
}

// --- the conversation --------------------------------------------------------------------

function setConversation(conversation) {
  state.conversation = conversation;
  $("share-button").disabled = !conversation; // nothing to share before the first message
  if (!conversation) {
    $("chat-title").textContent = "New chat";
    document.title = "Parley";
    return;
  }
  const title = conversation.title || "Untitled";
  $("chat-title").textContent = title;
  document.title = `${title} · Parley`;
}

// Show another conversation (null: a new chat) in place of the open one.
function show(conversationId) {
  state.shown += 1;
  if (state.socket) state.socket.close();
  state.socket = null;
  Object.assign(state, { activeRun: null, loadingOlder: false, creating: null, opening: null });
  state.cursors.clear();
  state.ended.clear();
  transcript.reset();
  branches.reset();
  setConversation(null);
  showConnection("idle");
  sendButton.disabled = false;
  setActiveRun(null);
  composerStatus.textContent = "";
  sidebar.setCurrent(conversationId);
  setSidebar(false);
  draft.reset();
  if (conversationId) state.opening = open(conversationId);
  input.focus();
}

// A new chat becomes a stored conversation on its first message, draft save or settings
// change; two of those at once still make one conversation.
async function ensureConversation() {
  if (state.opening) await state.opening; // an existing conversation still loading
  if (state.conversation) return state.conversation;
  if (!state.creating) {
    state.creating = createConversation().finally(() => {
      state.creating = null;
    });
  }
  return state.creating;
}

async function createConversation() {
  const shown = state.shown;
  const conversation = await api("conversations/", { method: "POST", body: {} });
  if (shown !== state.shown) return conversation; // another conversation was opened meanwhile
  setConversation(conversation);
  navigation.replace(conversation.id);
  sidebar.setCurrent(conversation.id);
  sidebar.touch(conversation);
  connect();
  // Listen before the first message is sent, so even a very fast reply is seen whole.
  await Promise.race([state.socket.ready, new Promise((resolve) => setTimeout(resolve, 5000))]);
  return conversation;
}

async function open(conversationId) {
  const shown = state.shown;
  let detail;
  let page;
  try {
    detail = await api(`conversations/${conversationId}/`);
    if (shown !== state.shown) return;
    setConversation(detail);
    draft.load(detail.draft);
    page = await branches.open(detail); // the newest page of the branch shown
  } catch (error) {
    if (shown === state.shown) transcript.note(error.message, "error");
    return;
  }
  if (shown !== state.shown) return;
  for (const message of page.results) transcript.addStored(message);
  transcript.scrollToBottom();
  if (detail.active_run) setActiveRun(detail.active_run);
  connect();
}

function connect() {
  // Frames and status of a socket closed for another conversation change nothing.
  const socket = new ConversationSocket(state.conversation.id, {
    onFrame: (frame) => state.socket === socket && handleFrame(frame),
    onStatus: (status, delay) => state.socket === socket && showConnection(status, delay),
  });
  state.socket = socket;
  socket.connect();
}

// Older messages load when the reader scrolls to the top (seq is gapless, so the page
// before the oldest shown one is simply `after = oldest - 1 - n`).
messagesBox.addEventListener("scroll", async () => {
  if (messagesBox.scrollTop > 120 || state.loadingOlder || !state.conversation) return;
  const oldest = transcript.oldestSeq;
  if (!oldest || oldest <= 1) return;
  state.loadingOlder = true;
  try {
    const after = Math.max(0, oldest - 1 - HISTORY_PAGE);
    const limit = oldest - 1 - after;
    const id = state.conversation.id;
    const page = await api(`conversations/${id}/messages/?after=${after}&limit=${limit}${branches.query()}`);
    if (state.conversation && state.conversation.id === id) transcript.prependPage(page.results);
  } catch (error) {
    flash(error.message);
  } finally {
    state.loadingOlder = false;
  }
});

// --- frames from the socket --------------------------------------------------------------

function handleFrame(frame) {
  if (branches.hold(frame)) return; // another version is being drawn: after it
  if ("sequence_number" in frame) {
    handleRunEvent(frame);
    return;
  }
  switch (frame.type) {
    case "conversation.connected":
      catchUp(frame);
      // What other tabs organised while no socket listened.
      if (frame.reconnected) sidebar.organiser.refresh();
      break;
    case "conversation.message":
      if (!branches.accepts(frame.message)) break;
      transcript.addStored(frame.message);
      if (transcript.nearBottom(200)) transcript.scrollToBottom();
      break;
    case "conversation.run_started":
      setActiveRun(frame.run);
      break;
    case "conversation.run_ended":
      state.ended.add(frame.run.id);
      if (state.activeRun && state.activeRun.id === frame.run.id) setActiveRun(null);
      break;
    case "conversation.updated":
      setConversation({ ...state.conversation, ...frame });
      sidebar.touch(state.conversation);
      branches.follow(frame.active_branch_id);
      break;
    case "conversation.draft_updated":
      draft.changed(frame.draft, frame.by);
      break;
    case "conversations.deleted":
      // Deleted elsewhere (another tab, the API, a moderator): gone from this list too.
      for (const id of frame.conversation_ids) sidebar.remove(id);
      break;
    case "conversation.organised": // pins, folders and tags changed in any tab
    case "folders.changed":
      sidebar.organiser.follow(frame);
      break;
    case "conversation.deleted":
    case "socket.gone":
      setActiveRun(null);
      transcript.note("This conversation was deleted.", "error");
      input.disabled = true;
      sendButton.disabled = true;
      files.setDisabled(true);
      break;
    case "error":
      if (frame.code === "stream_unavailable") {
        // The server could not keep reading the reply; a new connection resumes it.
        state.socket.restart();
      } else if (frame.code !== "no_active_run") {
        flash(frame.message);
      }
      break;
    default:
      break;
  }
}

// On every (re)connect, fetch what was stored while no socket listened (a first reply
// can end before a new chat's socket is up). After a reconnect, also follow a run that
// started meanwhile: the resume URL only covers the run that was being followed.
async function catchUp({ reconnected, active_run_id: activeRunId }) {
  const id = state.conversation.id;
  try {
    const page = await api(`conversations/${id}/messages/?after=${transcript.newestSeq}&limit=200${branches.query()}`);
    if (!state.conversation || state.conversation.id !== id) return;
    for (const message of page.results) transcript.addStored(message);
  } catch {
    // The next reconnect tries again.
  }
  if (!reconnected) return;
  branches.recheck(id);
  if (activeRunId && !state.cursors.has(activeRunId)) {
    state.socket.send({ type: "subscribe", run_id: activeRunId });
  } else if (!activeRunId && state.activeRun) {
    setActiveRun(null);
  }
}

// --- the composer ------------------------------------------------------------------------

function setActiveRun(run) {
  const active = run && ["queued", "in_progress"].includes(run.status) ? run : null;
  if (active && state.activeRun && state.activeRun.id === active.id) return;
  // A late notification or answer about a run whose end was already seen changes nothing.
  if (active && state.ended.has(active.id)) return;
  state.activeRun = active;
  messagesBox.setAttribute("aria-busy", String(Boolean(active)));
  updateComposer();
}

function updateComposer() {
  const running = Boolean(state.activeRun);
  stopButton.hidden = !running;
  sendButton.hidden = running;
  const online = $("connection").dataset.state;
  if (running) {
    input.disabled = true;
    composerStatus.textContent = "Parley is replying — wait for it to finish, or press Stop.";
  } else if (online === "gone") {
    input.disabled = true;
  } else {
    input.disabled = false;
    if (composerStatus.textContent.startsWith("Parley is replying")) composerStatus.textContent = "";
  }
  files.setDisabled(input.disabled);
  sendButton.disabled = input.disabled || files.uploading(); // sent once every file is up
}

async function send() {
  const content = input.value;
  const attachments = files.ready();
  if ((!content.trim() && !attachments.length) || state.activeRun || files.uploading()) return;
  if (content.length > config.maxMessageChars) {
    flash(`A message can be at most ${config.maxMessageChars} characters.`);
    return;
  }
  input.value = "";
  autosize();
  const pending = transcript.addPending(content);
  transcript.scrollToBottom();
  // Disabled at once: the run's own events follow within milliseconds.
  setActiveRun({ id: "pending", status: "queued" });
  const shown = state.shown;
  try {
    const conversation = await ensureConversation();
    if (shown !== state.shown) return;
    const clientId = crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2);
    const answer = await api(`conversations/${conversation.id}/messages/`, {
      method: "POST",
      body: { content, client_id: clientId, attachments: attachments.map((file) => file.id) },
    });
    files.clear(); // kept until the message is accepted, and after a refusal
    if (shown !== state.shown) return;
    transcript.addStored(answer.message);
    if (!state.activeRun || state.activeRun.id === "pending") setActiveRun(answer.run);
    sidebar.touch({ ...state.conversation, last_activity_at: answer.message.created_at });
  } catch (error) {
    if (shown !== state.shown) return;
    pending.remove();
    input.value = content;
    autosize();
    if (state.activeRun && state.activeRun.id === "pending") setActiveRun(null);
    flash(isRunActive(error) ? "A reply is still running; wait for it or press Stop." : error.message);
  }
}

async function stop() {
  const run = state.activeRun;
  if (!run || run.id === "pending") return;
  stopButton.disabled = true;
  composerStatus.textContent = "Stopping…";
  try {
    if (!state.socket.send({ type: "run.cancel" })) {
      await api(`runs/${run.id}/cancel/`, { method: "POST" });
    }
  } catch (error) {
    flash(error.message);
  } finally {
    stopButton.disabled = false;
  }
}

function autosize() {
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
}

input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});
input.addEventListener("input", autosize);
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  send();
});
stopButton.addEventListener("click", stop);

// --- header buttons ----------------------------------------------------------------------

async function openSettings(options = {}) {
  try {
    const conversation = await ensureConversation();
    const updated = await editSettings(conversation, options);
    if (updated) setConversation(updated);
  } catch (error) {
    flash(error.message);
  }
}

$("settings-button").addEventListener("click", () => openSettings());
$("share-button").addEventListener("click", () => {
  if (state.conversation) openShareDialog(state.conversation, { opener: $("share-button") });
});
// A tool card whose call lacked the user's token opens the settings at that server.
messagesBox.addEventListener(CREDENTIAL_WANTED, (event) => openSettings({ focusServer: event.detail.server }));

// --- start ---------------------------------------------------------------------------------

setUpPanels();
sidebar.reload();
if (config.conversationId) {
  state.opening = open(config.conversationId);
} else {
  draft.load("");
}
input.focus();
