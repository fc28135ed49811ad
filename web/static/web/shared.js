// The shared page: a link's snapshot drawn as the chat draws a conversation, with the
// chat's own transcript (Markdown, tool cards with their results, thoughts collapsed),
// read-only: its messages and code blocks can be copied. The messages come with the page;
// nothing of the owner's is fetched, so files are named, not shown. A signed-in reader may
// continue the conversation in their own account.
import { MessageActions } from "./actions.js";
import { api } from "./api.js";
import { clearProblem, showProblem } from "./problems.js";
import { Transcript } from "./transcript.js";

const box = document.getElementById("messages");
const transcript = new Transcript(box, { readOnly: true });
new MessageActions(box, { transcript, conversation: () => null, onForked: () => {} });

// Without an id a file is named only (its bytes are the owner's).
const named = (files) =>
  (files || []).map((file) => ({ filename: file.filename, content_type: file.content_type, size: file.size }));

// A long conversation is drawn a batch at a time: its start shows at once, and the page
// answers the reader while the rest is drawn.
const BATCH = 100;
const messages = JSON.parse(document.getElementById("shared-messages").textContent);
document.getElementById("empty").hidden = messages.length > 0;

function draw(start) {
  for (const message of messages.slice(start, start + BATCH)) {
    transcript.addStored({ ...message, attachments: named(message.attachments) });
  }
  if (start + BATCH < messages.length) setTimeout(() => draw(start + BATCH), 0);
  else box.removeAttribute("aria-busy");
}

box.setAttribute("aria-busy", "true");
draw(0);

const continueButton = document.getElementById("continue");
if (continueButton) {
  continueButton.addEventListener("click", async () => {
    const holder = document.getElementById("shared-actions");
    clearProblem(holder);
    continueButton.disabled = true;
    try {
      const copy = await api(continueButton.dataset.url, { method: "POST" });
      window.location.assign(`/chat/${encodeURIComponent(copy.id)}/`);
    } catch (error) {
      showProblem(holder, `Not continued: ${error.message}`);
      continueButton.disabled = false;
    }
  });
}
