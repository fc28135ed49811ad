// Import: a file chosen from disk goes to the API as it is: JSON, or a ZIP export that
// carries the files of its messages. A Parley export answers the one new conversation,
// which opens; a data export of many conversations (ChatGPT's conversations.json)
// answers a report, summed up under the button with what failed.
import { api } from "./api.js";

const MAX_PROBLEMS = 5;

export class Importer {
  // `onImported(conversation)` opens one; `onReport(report)` after a report of many.
  constructor({ onImported, onReport }) {
    this.onImported = onImported;
    this.onReport = onReport;
    this.button = document.getElementById("import-button");
    this.file = document.getElementById("import-file");
    this.status = document.getElementById("import-status");
    this.button.addEventListener("click", () => this.file.click());
    this.file.addEventListener("change", () => this.upload());
  }

  async upload() {
    const file = this.file.files[0];
    if (!file) return;
    this.button.disabled = true;
    this.show(`Importing “${file.name}”…`);
    try {
      const zip = /\.zip$/i.test(file.name) || /zip/.test(file.type);
      const answer = await api("conversations/import/", {
        method: "POST",
        body: file,
        contentType: zip ? "application/zip" : "application/json",
      });
      if (answer && Array.isArray(answer.results)) {
        this.report(answer);
        this.onReport(answer);
      } else {
        this.show(`Imported “${answer.title || "Untitled"}”.`);
        this.onImported(answer);
      }
    } catch (error) {
      const problems = (error.details && error.details.problems) || [];
      const lines = problems.slice(0, MAX_PROBLEMS).map(({ path, message }) => `${path}: ${message}`);
      if (problems.length > MAX_PROBLEMS) lines.push(`… and ${problems.length - MAX_PROBLEMS} more`);
      this.show(`Import failed: ${error.message}`, lines, { error: true });
    } finally {
      this.button.disabled = false;
      this.file.value = ""; // the same file can be chosen again
    }
  }

  report({ results, imported, failed }) {
    const done = imported ?? results.filter((result) => result.status === "imported").length;
    const total = imported !== undefined && failed !== undefined ? imported + failed : results.length;
    const failures = results
      .filter((result) => result.status !== "imported")
      .map((result) => {
        const title = result.title || `Conversation ${result.index + 1}`;
        return `${title}: ${result.error ? result.error.message : "not imported"}`;
      });
    const noun = total === 1 ? "conversation" : "conversations";
    this.show(`Imported ${done} of ${total} ${noun}.`, failures, { error: failures.length > 0 });
  }

  show(text, lines = [], { error = false } = {}) {
    this.status.replaceChildren();
    this.status.classList.toggle("error", error);
    const summary = document.createElement("p");
    summary.textContent = text;
    this.status.append(summary);
    if (lines.length) {
      const list = document.createElement("ul");
      for (const line of lines) {
        const item = document.createElement("li");
        item.textContent = line;
        list.append(item);
      }
      this.status.append(list);
    }
  }
}
