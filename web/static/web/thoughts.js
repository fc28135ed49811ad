// A reasoning model's thoughts above a reply's text: a collapsed <details> whose summary
// says "Thinking…" while they stream and "Thought for 4 s" once the answer begins (the
// transcript streams them in). Plain text, never rendered as markup.

export function thoughtsBox(element) {
  let box = element.querySelector("details.reasoning");
  if (!box) {
    box = document.createElement("details");
    box.className = "reasoning";
    const summary = document.createElement("summary");
    const text = document.createElement("div");
    text.className = "reasoning-text";
    box.append(summary, text);
    element.querySelector(".content").before(box);
  }
  return box;
}

export function thoughtsLabel(element, ms) {
  const box = thoughtsBox(element);
  box.classList.remove("thinking");
  box.dataset.done = "true";
  const seconds = typeof ms === "number" ? Math.max(1, Math.round(ms / 1000)) : null;
  box.querySelector("summary").textContent =
    seconds === null ? "Thought before answering" : `Thought for ${seconds} s`;
}

// From the stored message, which is the truth (it replaces what streamed).
export function storedThoughts(element, message) {
  const existing = element.querySelector("details.reasoning");
  if (!message.reasoning) {
    if (existing) existing.remove();
    return;
  }
  const box = existing || thoughtsBox(element);
  box.querySelector(".reasoning-text").textContent = message.reasoning;
  thoughtsLabel(element, message.reasoning_ms);
}
