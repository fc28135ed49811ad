// Share links. The dialog (from a conversation's menu or the chat's Share button) makes a
// read-only link to the conversation as it is now, for anyone holding it or for signed-in
// users only, expiring or not, and shows its address with a Copy button: the address is
// shown only then (the server keeps a hash of it). It lists the conversation's links with
// their audience, dates, views and state, each revocable. The shared links page revokes
// with the same function.
import { copyText, problemText } from "./actions.js";
import { api } from "./api.js";
import { ask } from "./dialogs.js";
import { clearProblem, showProblem } from "./problems.js";

const DAY_MS = 24 * 60 * 60 * 1000;
const AUDIENCE = { public: "Anyone with the link", signed_in: "Signed-in users" };

const DIALOG = `
  <h2 id="share-heading"></h2>
  <p class="muted small">A read-only copy of the conversation as it is now: later messages and
    other versions do not show, nor do your name, the draft or the system prompt.</p>
  <form id="share-form" novalidate>
    <fieldset class="field">
      <legend>Who can open it</legend>
      <label class="check"><input type="radio" name="audience" value="public" checked> Anyone with the link</label>
      <label class="check"><input type="radio" name="audience" value="signed_in"> Only people signed in to Parley</label>
    </fieldset>
    <div class="field share-expiry">
      <label for="share-expiry">Expires</label>
      <select id="share-expiry">
        <option value="">Never</option>
        <option value="1">In 1 day</option>
        <option value="7">In 7 days</option>
        <option value="30">In 30 days</option>
        <option value="date">On a date…</option>
      </select>
      <input type="date" id="share-expiry-date" aria-label="Expiry date" hidden>
    </div>
    <div id="share-problems" class="share-problems"></div>
    <button type="submit" id="share-create" class="primary">Create link</button>
  </form>
  <div id="share-made" class="share-made" hidden>
    <label for="share-url">Link</label>
    <div class="share-url-row">
      <input id="share-url" type="text" readonly aria-describedby="share-copy-status">
      <button type="button" id="share-copy">Copy</button>
    </div>
    <p id="share-copy-status" class="small muted" role="status">Copy it now: the link is shown only this once.</p>
  </div>
  <h3 id="share-list-heading">Links to this conversation</h3>
  <p id="share-list-status" class="small muted" role="status"></p>
  <ul id="share-list" class="share-list" aria-labelledby="share-list-heading"></ul>
  <div class="dialog-actions"><button type="button" id="share-close">Close</button></div>`;

let dialog = null;
let current = null; // {conversation, opener, made}

function when(iso) {
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

export function shareStatus(share) {
  if (share.revoked_at) return "revoked";
  if (share.expires_at && new Date(share.expires_at) <= new Date()) return "expired";
  return "active";
}

// Asks first; true once revoked. The link answers "not found" from then on.
export async function revokeShare(id) {
  const sure = await ask({
    title: "Revoke this link?",
    text: "Whoever holds it will find nothing there from now on. This cannot be undone.",
    ok: "Revoke",
    danger: true,
  });
  if (!sure) return false;
  await api(`shares/${encodeURIComponent(id)}/`, { method: "DELETE" });
  return true;
}

// Open the dialog for `conversation` ({id, title}); focus goes back to `opener` after.
export function openShareDialog(conversation, { opener = document.activeElement } = {}) {
  const box = dialog || build();
  current = { conversation, opener, made: null };
  box.querySelector("#share-heading").textContent = `Share “${conversation.title || "Untitled"}”`;
  box.querySelector("#share-form").reset();
  box.querySelector("#share-expiry-date").hidden = true;
  box.querySelector("#share-made").hidden = true;
  clearProblem(box.querySelector("#share-problems"));
  box.showModal();
  loadList();
}

function build() {
  dialog = document.createElement("dialog");
  dialog.id = "share-dialog";
  dialog.className = "share-dialog";
  dialog.setAttribute("aria-labelledby", "share-heading");
  dialog.innerHTML = DIALOG;
  document.body.append(dialog);
  const $ = (id) => dialog.querySelector(`#${id}`);
  $("share-expiry").addEventListener("change", () => {
    const date = $("share-expiry-date");
    date.hidden = $("share-expiry").value !== "date";
    date.min = new Date(Date.now() + DAY_MS).toISOString().slice(0, 10);
    if (!date.hidden) date.focus();
  });
  $("share-form").addEventListener("submit", (event) => {
    event.preventDefault();
    create();
  });
  $("share-copy").addEventListener("click", () => copyLink());
  $("share-close").addEventListener("click", () => dialog.close());
  $("share-list").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-revoke-share]");
    if (button) revokeFromList(button);
  });
  dialog.addEventListener("close", () => {
    const opener = current && current.opener;
    if (opener && opener.isConnected && opener.offsetParent !== null) opener.focus();
  });
  return dialog;
}

// The chosen expiry as the API takes it: null for never; a date's end of day, local time.
function expiry() {
  const choice = dialog.querySelector("#share-expiry").value;
  if (!choice) return { value: null };
  if (choice !== "date") return { value: new Date(Date.now() + Number(choice) * DAY_MS).toISOString() };
  const day = dialog.querySelector("#share-expiry-date").value;
  if (!day) return { problem: "Choose the day the link expires." };
  return { value: new Date(`${day}T23:59:59`).toISOString() };
}

async function create() {
  const problems = dialog.querySelector("#share-problems");
  const button = dialog.querySelector("#share-create");
  clearProblem(problems);
  const { value, problem } = expiry();
  if (problem) {
    showProblem(problems, problem);
    return;
  }
  const audience = dialog.querySelector("input[name=audience]:checked").value;
  const target = current;
  button.disabled = true;
  try {
    const share = await api(`conversations/${encodeURIComponent(target.conversation.id)}/shares/`, {
      method: "POST",
      body: { audience, expires_at: value },
    });
    if (target !== current) return; // the dialog was opened for another conversation meanwhile
    target.made = share.id;
    const url = dialog.querySelector("#share-url");
    url.value = new URL(share.url, window.location.origin).href;
    dialog.querySelector("#share-copy-status").textContent = "Copy it now: the link is shown only this once.";
    dialog.querySelector("#share-made").hidden = false;
    url.focus();
    url.select();
    loadList();
  } catch (error) {
    showProblem(problems, `Not shared: ${problemText(error)}`);
  } finally {
    button.disabled = false;
  }
}

async function copyLink() {
  const url = dialog.querySelector("#share-url");
  const status = dialog.querySelector("#share-copy-status");
  try {
    await copyText(url.value);
    status.textContent = "Copied to the clipboard.";
  } catch {
    // Selected, for the reader's own Ctrl+C.
    url.focus();
    url.select();
    status.textContent = "Not copied by the browser: the link is selected, press Ctrl+C (⌘C) to copy it.";
  }
}

async function loadList() {
  const target = current;
  const list = dialog.querySelector("#share-list");
  const status = dialog.querySelector("#share-list-status");
  status.textContent = "Loading…";
  try {
    const page = await api(`conversations/${encodeURIComponent(target.conversation.id)}/shares/`);
    if (target !== current) return;
    list.replaceChildren(...page.results.map(shareItem));
    status.textContent = page.results.length ? "" : "No links yet.";
  } catch (error) {
    if (target === current) status.textContent = error.message;
  }
}

function shareItem(share) {
  const item = document.createElement("li");
  item.className = "share-item";
  item.dataset.shareId = share.id;
  const state = shareStatus(share);
  item.dataset.status = state;
  const info = document.createElement("div");
  info.className = "share-info";
  const who = document.createElement("strong");
  who.textContent = AUDIENCE[share.audience] || share.audience;
  const details = document.createElement("span");
  details.className = "small muted";
  const views = share.view_count === 1 ? "1 view" : `${share.view_count} views`;
  const messages = share.message_count === 1 ? "1 message" : `${share.message_count} messages`;
  const expires = share.expires_at ? `expires ${when(share.expires_at)}` : "never expires";
  details.textContent = `Created ${when(share.created_at)} · ${expires} · ${views} · ${messages}`;
  const status = document.createElement("span");
  status.className = "share-status";
  status.textContent = state;
  info.append(who, " ", status, document.createElement("br"), details);
  item.append(info);
  if (!share.revoked_at) {
    const revoke = document.createElement("button");
    revoke.type = "button";
    revoke.className = "danger";
    revoke.dataset.revokeShare = share.id;
    revoke.textContent = "Revoke";
    revoke.setAttribute("aria-label", `Revoke the link created ${when(share.created_at)}`);
    item.append(revoke);
  }
  return item;
}

async function revokeFromList(button) {
  const problems = dialog.querySelector("#share-problems");
  clearProblem(problems);
  const id = button.dataset.revokeShare;
  try {
    if (!(await revokeShare(id))) return;
    if (current.made === id) dialog.querySelector("#share-made").hidden = true;
    await loadList();
    dialog.querySelector("#share-list-status").textContent = "Revoked.";
    dialog.querySelector("#share-close").focus();
  } catch (error) {
    showProblem(problems, `Not revoked: ${error.message}`);
  }
}
