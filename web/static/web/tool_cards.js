// A tool call's card: the tool (a tool server's as "server · tool"), its arguments and
// its result, with the images the tool returned. A result saying the user's token for a
// tool server is missing or refused offers to open the settings where it is set.
import { attachmentsBox } from "./files.js";

// A tool server's tools reach the model as `<server>__<tool>`.
export const TOOL_SEPARATOR = "__";
// The words the server's credential refusal ends with, naming the server.
const CREDENTIAL_REFUSAL = /credential missing or refused: set your token for ([a-z0-9_-]+)/;
// Asks the page to open the settings at a tool server's token (detail: {server}).
export const CREDENTIAL_WANTED = "parley:tool-credential";

export function toolLabel(name) {
  const at = name.indexOf(TOOL_SEPARATOR);
  if (at <= 0) return name;
  return `${name.slice(0, at)} · ${name.slice(at + TOOL_SEPARATOR.length)}`;
}

export function buildToolCard(callId, name) {
  const card = document.createElement("section");
  card.className = "tool-card";
  card.dataset.callId = callId;
  card.dataset.state = "running";
  card.dataset.tool = name;
  card.setAttribute("aria-label", `Tool call: ${toolLabel(name)}`);
  card.innerHTML = `
    <header><span class="tool-icon" aria-hidden="true">⚙</span>
      <span class="tool-name"></span><span class="tool-state">running…</span></header>
    <dl><dt>Arguments</dt><dd><pre class="tool-args"></pre></dd>
      <dt>Result</dt><dd class="tool-output"><pre class="tool-result">…</pre></dd></dl>`;
  card.querySelector(".tool-name").textContent = toolLabel(name);
  return card;
}

// The result on its card; `files` are those kept with it (omitted: leave any shown).
export function showToolResult(card, output, isError, files) {
  card.dataset.state = isError ? "error" : "done";
  card.querySelector(".tool-state").textContent = isError ? "failed" : "done";
  card.querySelector(".tool-result").textContent = output;
  if (Array.isArray(files)) showToolFiles(card, files);
  const hint = card.querySelector(".tool-hint");
  if (hint) hint.remove();
  const refusal = isError ? CREDENTIAL_REFUSAL.exec(output) : null;
  if (refusal) card.append(credentialHint(refusal[1]));
}

function showToolFiles(card, files) {
  const holder = card.querySelector(".tool-output");
  const old = holder.querySelector(".attachments");
  const ids = files.map((file) => file.id).join(",");
  if (old && old.dataset.ids === ids) return; // already shown: not fetched again
  if (old) old.remove();
  if (files.length) holder.append(attachmentsBox(files));
}

function credentialHint(server) {
  const hint = document.createElement("p");
  hint.className = "tool-hint small";
  hint.append(`The tool server ${server} needs your own token. `);
  const button = document.createElement("button");
  button.type = "button";
  button.className = "link";
  button.textContent = `Set your token for ${server}`;
  button.addEventListener("click", () => {
    button.dispatchEvent(new CustomEvent(CREDENTIAL_WANTED, { bubbles: true, detail: { server } }));
  });
  hint.append(button, " in the conversation's settings.");
  return hint;
}
