// Small modal questions (confirm, ask for a text) on the native <dialog>, which brings
// focus handling, Escape to cancel and the inert background for free.

const dialog = () => document.getElementById("ask-dialog");

export function ask({ title, text = "", label = "", value = null, ok = "OK", danger = false }) {
  const box = dialog();
  box.querySelector("#ask-heading").textContent = title;
  box.querySelector("#ask-text").textContent = text;
  const field = box.querySelector("#ask-field");
  const input = box.querySelector("#ask-input");
  field.hidden = value === null;
  box.querySelector("#ask-label").textContent = label;
  input.value = value ?? "";
  const okButton = box.querySelector("#ask-ok");
  okButton.textContent = ok;
  okButton.className = danger ? "danger" : "primary";
  // Enter in the field answers OK: the form's default button (the first) is Cancel.
  input.onkeydown = (event) => {
    if (event.key === "Enter" && !event.isComposing) {
      event.preventDefault();
      okButton.click();
    }
  };
  box.returnValue = "";
  return new Promise((resolve) => {
    box.addEventListener(
      "close",
      () => {
        if (box.returnValue !== "ok") resolve(null);
        else resolve(value === null ? true : input.value);
      },
      { once: true },
    );
    box.showModal();
    if (value !== null) input.select();
  });
}
