// The tool servers open to the user, in the settings dialog: each one's tools as
// checkboxes grouped under its name with what its status means, and for a server where
// each user brings their own token, a form that sets or removes it at once. The token is
// never shown again: the form says only whether one is set.
import { api } from "./api.js";
import { TOOL_SEPARATOR } from "./tool_cards.js";

// What a listing's status means to the user (nothing when all is well).
const STATUS_TEXT = {
  ok: "",
  unreachable: "Cannot be reached now: its tools are those it listed last, and calls fail until it is back.",
  credential_missing: "Set your token below to use its tools.",
  credential_refused: "The server refused the token it was sent: set a new one.",
  error: "Its tools could not be read.",
};

// The API's refusal as sentences ("Token: must be visible ASCII characters, ...").
function problemText(problem) {
  const problems = (problem.details && problem.details.problems) || [];
  const label = (path) => (path === "$.token" ? "Token" : path);
  return problems.length
    ? problems.map((item) => `${label(item.path)}: ${item.message}.`).join(" ")
    : problem.message;
}

function element(tag, className, text) {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text !== undefined) made.textContent = text;
  return made;
}

export class ToolServers {
  constructor(container) {
    this.container = container;
    this.enabled = new Set();
    this.loading = null;
  }

  // Draw the servers open to the user, the conversation's `enabled` tools ticked.
  show(enabled) {
    this.enabled = new Set(enabled.filter((name) => name.includes(TOOL_SEPARATOR)));
    this.container.replaceChildren(element("p", "muted small", "Loading tool servers…"));
    // The dialog opened again meanwhile: an older answer draws nothing.
    const shown = (this.shown = (this.shown || 0) + 1);
    const loading = api("tool-servers/")
      .then((page) => {
        if (shown !== this.shown) return;
        this.container.replaceChildren(...page.results.map((server) => this.group(server)));
        this.keepUnlisted();
      })
      .catch((error) => {
        if (shown !== this.shown) return;
        const line = element("p", "errors small", `Tool servers could not be listed: ${error.message}`);
        line.setAttribute("role", "alert");
        this.container.replaceChildren(line);
        this.keepUnlisted();
      })
      .finally(() => {
        if (this.loading === loading) this.loading = null;
      });
    this.loading = loading;
    return loading;
  }

  // The tool servers' tools ticked (while they load: those the conversation had).
  checked() {
    if (this.loading) return [...this.enabled];
    const boxes = this.container.querySelectorAll(".server-tools input[type=checkbox]:checked");
    return [...boxes].map((input) => input.value);
  }

  // Bring a server's token field into view and focus it (asked for from a tool card).
  async focusCredential(serverName) {
    if (this.loading) await this.loading;
    const group = [...this.container.querySelectorAll("fieldset.tool-server")].find(
      (set) => set.dataset.server === serverName,
    );
    if (!group) return;
    group.scrollIntoView({ block: "nearest" });
    const input = group.querySelector(".credential input");
    (input || group).focus();
  }

  group(server) {
    const set = element("fieldset", "field tool-server");
    set.dataset.server = server.name;
    const status = element("p", "server-status small");
    status.id = `tool-server-${server.id}-status`;
    set.setAttribute("aria-describedby", status.id);
    set.append(element("legend", "", server.name), status, element("div", "server-tools"));
    this.fill(set, server);
    if (server.auth === "per_user") set.append(this.credentialForm(set, server));
    return set;
  }

  // The server's status and tools (drawn again once its token changed).
  fill(set, server) {
    const status = set.querySelector(".server-status");
    status.dataset.status = server.status;
    status.textContent = STATUS_TEXT[server.status] ?? server.status;
    const box = set.querySelector(".server-tools");
    box.replaceChildren();
    for (const tool of server.tools) {
      box.append(this.toolCheck(`${server.name}${TOOL_SEPARATOR}${tool.name}`, tool.name, tool.description));
    }
    if (!server.tools.length) box.append(element("p", "muted small", "No tools listed."));
  }

  toolCheck(value, name, description) {
    const label = element("label", "check");
    const input = document.createElement("input");
    input.type = "checkbox";
    input.value = value;
    input.checked = this.enabled.has(value);
    input.addEventListener("change", () => {
      if (input.checked) this.enabled.add(value);
      else this.enabled.delete(value);
    });
    const text = element("span", "muted small", description ? ` — ${description}` : "");
    label.append(input, " ", element("strong", "", name), text);
    return label;
  }

  // Tools the conversation has that no server lists now stay ticked where they belong,
  // so saving the settings does not drop them unseen.
  keepUnlisted() {
    const shown = new Set([...this.container.querySelectorAll(".server-tools input")].map((i) => i.value));
    for (const name of this.enabled) {
      if (shown.has(name)) continue;
      const at = name.indexOf(TOOL_SEPARATOR);
      const [serverName, toolName] = [name.slice(0, at), name.slice(at + TOOL_SEPARATOR.length)];
      let set = [...this.container.querySelectorAll("fieldset.tool-server")].find(
        (group) => group.dataset.server === serverName,
      );
      if (!set) {
        set = element("fieldset", "field tool-server");
        set.dataset.server = serverName;
        set.append(element("legend", "", serverName), element("p", "server-status small",
          "This tool server is not open to you now."), element("div", "server-tools"));
        this.container.append(set);
      }
      set.querySelector(".server-tools").append(this.toolCheck(name, toolName, "not listed now"));
    }
  }

  credentialForm(set, server) {
    const form = element("div", "credential");
    const id = `tool-server-${server.id}-token`;
    const label = element("label", "", `Your token for ${server.name}`);
    label.htmlFor = id;
    const input = document.createElement("input");
    Object.assign(input, { type: "password", id, autocomplete: "off", spellcheck: false });
    const state = element("span", "credential-state small");
    state.setAttribute("role", "status");
    const save = element("button", "", "Save token");
    const remove = element("button", "", "Remove token");
    save.type = remove.type = "button";
    const error = element("p", "errors small");
    error.setAttribute("role", "alert");
    const actions = element("div", "credential-actions");
    actions.append(save, remove, state);
    form.append(label, input, actions, error);

    const showSet = (isSet) => {
      state.textContent = isSet ? "Token set" : "No token";
      remove.disabled = !isSet;
    };
    const change = async (method) => {
      error.textContent = "";
      const token = input.value;
      if (method === "PUT" && !token) {
        error.textContent = "Enter the token first.";
        input.focus();
        return;
      }
      save.disabled = remove.disabled = true;
      try {
        const answer = await api(`tool-servers/${server.id}/credential/`, {
          method,
          body: method === "PUT" ? { token } : undefined,
        });
        input.value = "";
        showSet(answer.credential_set);
        // Its tools and status as the new token reads them.
        this.fill(set, await api(`tool-servers/${server.id}/`));
      } catch (problem) {
        error.textContent = problemText(problem);
        showSet(state.textContent === "Token set");
      } finally {
        save.disabled = false;
      }
    };
    save.addEventListener("click", () => change("PUT"));
    remove.addEventListener("click", () => change("DELETE"));
    // Enter saves the token (it would otherwise submit, and close, the dialog).
    input.addEventListener("keydown", (event) => {
      if (event.key !== "Enter") return;
      event.preventDefault();
      change("PUT");
    });
    showSet(server.credential_set);
    return form;
  }
}
