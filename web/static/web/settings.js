// Per-conversation settings in a dialog: system prompt, model, generation settings
// (temperature, max output tokens), whether the model takes images, enabled tools (the
// built-in ones, and those of the tool servers open to the user: tool_servers.js).
import { api } from "./api.js";
import { ToolServers } from "./tool_servers.js";

let toolsCache = null;
let servers = null;

// The fields a problem's path can name, by the top-level key of the API's body.
const FIELD_LABELS = {
  system_prompt: "System prompt",
  model: "Model",
  temperature: "Temperature",
  max_output_tokens: "Max output tokens",
  tools: "Tools",
};

function pageConfig() {
  return JSON.parse(document.getElementById("parley-config").textContent);
}

// An empty field means the server's default, sent as null; anything else goes to the
// server as a number, which judges its range and answers what is wrong.
function numberOrNull(input) {
  const text = input.value.trim();
  return text === "" ? null : Number(text);
}

// The API's 400 as one sentence per field ("Temperature: must be between 0 and 2"), the
// fields concerned marked invalid.
function showProblems(problem, error, inputs) {
  const problems = (problem.details && problem.details.problems) || [];
  const lines = [];
  for (const { path, message } of problems) {
    const key = (/^\$\.(\w+)/.exec(path) || [])[1];
    if (inputs[key]) inputs[key].setAttribute("aria-invalid", "true");
    lines.push(`${FIELD_LABELS[key] || path}: ${message}.`);
  }
  error.textContent = lines.length ? lines.join(" ") : problem.message;
  const first = Object.values(inputs).find((input) => input.getAttribute("aria-invalid") === "true");
  if (first) first.focus();
}

// `focusServer`: a tool server's name whose token field gets the focus (from a tool card).
export async function editSettings(conversation, { focusServer = null } = {}) {
  const dialog = document.getElementById("settings-dialog");
  const prompt = document.getElementById("settings-system-prompt");
  const model = document.getElementById("settings-model");
  const box = document.getElementById("settings-tools");
  const error = document.getElementById("settings-error");
  const temperature = document.getElementById("settings-temperature");
  const maxTokens = document.getElementById("settings-max-output-tokens");
  const vision = document.getElementById("settings-vision");
  const inputs = { system_prompt: prompt, model, temperature, max_output_tokens: maxTokens };
  error.textContent = "";
  for (const input of Object.values(inputs)) input.removeAttribute("aria-invalid");
  // The built-ins; the tool servers' own are listed (afresh each time) by `servers`.
  if (!toolsCache) toolsCache = (await api("tools/")).results.filter((tool) => !tool.server);
  if (!servers) servers = new ToolServers(document.getElementById("settings-servers"));
  servers.show(conversation.tools);
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
  const config = pageConfig();
  temperature.value = conversation.temperature ?? "";
  const defaultTemperature = config.defaultTemperature ?? "the model's own";
  temperature.placeholder = `Default: ${defaultTemperature}`;
  maxTokens.value = conversation.max_output_tokens ?? "";
  maxTokens.placeholder = `Default: ${config.defaultMaxOutputTokens}`;
  maxTokens.max = config.maxOutputTokensCap;
  vision.checked = conversation.vision;
  dialog.showModal();
  if (focusServer) servers.focusCredential(focusServer);
  return new Promise((resolve) => {
    const form = document.getElementById("settings-form");
    const onSubmit = async (event) => {
      if (event.submitter && event.submitter.value !== "save") return;
      event.preventDefault();
      const builtIn = [...box.querySelectorAll("input:checked")].map((input) => input.value);
      const tools = [...builtIn, ...servers.checked()];
      error.textContent = "";
      for (const input of Object.values(inputs)) input.removeAttribute("aria-invalid");
      // What the browser could not read as a number never reaches the server.
      const unreadable = [temperature, maxTokens].find((input) => input.validity.badInput);
      if (unreadable) {
        unreadable.setAttribute("aria-invalid", "true");
        error.textContent = `${unreadable.labels[0].textContent}: must be a number.`;
        unreadable.focus();
        return;
      }
      try {
        const updated = await api(`conversations/${conversation.id}/`, {
          method: "PATCH",
          body: {
            system_prompt: prompt.value,
            model: model.value,
            temperature: numberOrNull(temperature),
            max_output_tokens: numberOrNull(maxTokens),
            vision: vision.checked,
            tools,
          },
        });
        form.removeEventListener("submit", onSubmit);
        dialog.close();
        resolve(updated);
      } catch (problem) {
        showProblems(problem, error, inputs);
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
