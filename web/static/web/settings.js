// Per-conversation settings in a dialog: system prompt, model, enabled tools.
import { api } from "./api.js";

let toolsCache = null;

export async function editSettings(conversation) {
  const dialog = document.getElementById("settings-dialog");
  const prompt = document.getElementById("settings-system-prompt");
  const model = document.getElementById("settings-model");
  const box = document.getElementById("settings-tools");
  const error = document.getElementById("settings-error");
  error.textContent = "";
  if (!toolsCache) toolsCache = (await api("tools/")).results;
  box.querySelectorAll("label").forEach((label) => label.remove());
  for (const tool of toolsCache) {
    const label = document.createElement("label");
    label.className = "check";
    const input = document.createElement("input");
    input.type = "checkbox";
    input.value = tool.name;
    input.checked = conversation.tools.includes(tool.name);
    const name = document.createElement("strong");
    name.textContent = tool.name;
    const description = document.createElement("span");
    description.className = "muted small";
    description.textContent = tool.description ? ` — ${tool.description}` : "";
    label.append(input, " ", name, description);
    box.append(label);
  }
  prompt.value = conversation.system_prompt;
  model.value = conversation.model;
  dialog.showModal();
  return new Promise((resolve) => {
    const form = document.getElementById("settings-form");
    const onSubmit = async (event) => {
      if (event.submitter && event.submitter.value !== "save") return;
      event.preventDefault();
      const tools = [...box.querySelectorAll("input:checked")].map((input) => input.value);
      try {
        const updated = await api(`conversations/${conversation.id}/`, {
          method: "PATCH",
          body: { system_prompt: prompt.value, model: model.value, tools },
        });
        form.removeEventListener("submit", onSubmit);
        dialog.close();
        resolve(updated);
      } catch (problem) {
        error.textContent = problem.message;
      }
    };
    form.addEventListener("submit", onSubmit);
    dialog.addEventListener(
      "close",
      () => {
        form.removeEventListener("submit", onSubmit);
        resolve(null);
      },
      { once: true },
    );
  });
}
