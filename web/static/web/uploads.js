// Files for the next message: chosen with the attach button, dropped on the chat or
// pasted into the message box. Each one uploads at once (files/) with a progress bar and
// shows as a chip — a thumbnail made from the local file for an image, else an icon, name
// and size — with a button that removes it. What the server refuses is said beside the
// box in its own words; the typed text and the other chips stay.
import { apiUpload } from "./api.js";
import { fileIcon, isImage, nameAndSize, sizeText } from "./files.js";
import { clearProblem, showProblem } from "./problems.js";

export class ComposerFiles {
  // The limits from the page's settings; `onChange()` whenever an upload starts or ends,
  // or a chip comes or goes.
  constructor({ maxFilesPerMessage, maxFileBytes }, { onChange }) {
    this.maxFiles = maxFilesPerMessage;
    this.maxBytes = maxFileBytes;
    this.onChange = onChange;
    this.items = []; // {file, chip, upload, stored, preview}
    this.disabled = false;
    this.tray = document.getElementById("composer-files");
    this.problems = document.getElementById("composer-problems");
    this.button = document.getElementById("attach");
    this.picker = document.getElementById("attach-input");
    this.button.addEventListener("click", () => this.picker.click());
    this.picker.addEventListener("change", () => {
      this.add([...this.picker.files]);
      this.picker.value = ""; // the same file can be chosen again after a removal
    });
    this.listenForDrops(document.getElementById("chat"));
    document.getElementById("composer-input").addEventListener("paste", (event) => this.paste(event));
  }

  listenForDrops(zone) {
    const carriesFiles = (event) => event.dataTransfer && [...event.dataTransfer.types].includes("Files");
    let depth = 0; // enter and leave fire for every child crossed
    zone.addEventListener("dragenter", (event) => {
      if (!carriesFiles(event) || this.disabled) return;
      depth += 1;
      zone.classList.add("dropping");
    });
    zone.addEventListener("dragleave", () => {
      depth = Math.max(0, depth - 1);
      if (!depth) zone.classList.remove("dropping");
    });
    zone.addEventListener("dragover", (event) => {
      if (!carriesFiles(event)) return;
      event.preventDefault(); // else the browser opens the file in place of the page
      event.dataTransfer.dropEffect = this.disabled ? "none" : "copy";
    });
    zone.addEventListener("drop", (event) => {
      depth = 0;
      zone.classList.remove("dropping");
      if (!event.dataTransfer || !event.dataTransfer.files.length) return;
      event.preventDefault();
      if (!this.disabled) this.add([...event.dataTransfer.files]);
    });
  }

  // A pasted image (a screenshot) becomes a chip; pasted text still goes into the box.
  paste(event) {
    const files = event.clipboardData ? [...event.clipboardData.files] : [];
    if (!files.length || this.disabled) return;
    if (!event.clipboardData.types.includes("text/plain")) event.preventDefault();
    this.add(files);
  }

  add(files) {
    if (this.disabled) return;
    clearProblem(this.problems);
    for (const file of files) {
      if (this.items.length >= this.maxFiles) {
        this.refuse(file, `at most ${this.maxFiles} files can go with one message.`);
        continue;
      }
      if (file.size > this.maxBytes) {
        this.refuse(file, `it is larger than ${sizeText(this.maxBytes)}, the limit for one file.`);
        continue;
      }
      this.start(file);
    }
    this.onChange();
  }

  refuse(file, reason) {
    showProblem(this.problems, `“${file.name}” was not added: ${reason}`);
  }

  start(file) {
    const item = { file, stored: null, preview: null };
    item.chip = this.chip(item);
    this.items.push(item);
    this.tray.append(item.chip);
    this.tray.hidden = false;
    const bar = item.chip.querySelector("progress");
    item.upload = apiUpload("files/", file, { onProgress: (fraction) => (bar.value = fraction) });
    item.upload.done.then(
      (stored) => {
        if (this.items.some((other) => other.stored && other.stored.id === stored.id)) {
          this.drop(item); // the same bytes again: the server keeps one file
          showProblem(this.problems, `“${file.name}” is attached already.`);
          return;
        }
        item.stored = stored;
        item.upload = null;
        item.chip.dataset.state = "done";
        bar.remove();
        this.onChange();
      },
      (error) => {
        item.upload = null;
        if (error.code === "aborted") return; // removed by the user
        this.drop(item);
        showProblem(this.problems, `“${file.name}” was not added: ${error.message}`);
      },
    );
  }

  chip(item) {
    const { file } = item;
    const chip = document.createElement("li");
    chip.className = "upload";
    chip.dataset.state = "uploading";
    if (isImage(file.type)) {
      item.preview = URL.createObjectURL(file);
      const image = document.createElement("img");
      image.src = item.preview;
      image.alt = "";
      chip.append(image);
    } else {
      chip.append(fileIcon());
    }
    const label = document.createElement("span");
    label.className = "upload-label";
    const [name, size] = nameAndSize(file.name, file.size);
    const bar = document.createElement("progress");
    bar.max = 1;
    bar.value = 0;
    bar.setAttribute("aria-label", `Uploading ${file.name}`);
    label.append(name, size, bar);
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "upload-remove";
    remove.textContent = "×";
    remove.setAttribute("aria-label", `Remove ${file.name}`);
    remove.addEventListener("click", () => this.remove(item));
    chip.append(label, remove);
    return chip;
  }

  remove(item) {
    if (this.disabled) return;
    if (item.upload) item.upload.abort();
    this.drop(item);
    document.getElementById("composer-input").focus();
  }

  drop(item) {
    const index = this.items.indexOf(item);
    if (index >= 0) this.items.splice(index, 1);
    if (item.preview) URL.revokeObjectURL(item.preview);
    item.chip.remove();
    this.tray.hidden = !this.items.length;
    this.onChange();
  }

  uploading() {
    return this.items.some((item) => !item.stored);
  }

  // The uploaded files, in the order they were added ({id, filename, content_type, size}).
  ready() {
    return this.items.filter((item) => item.stored).map((item) => item.stored);
  }

  // The message went: its chips go too (the transcript shows its files from now on).
  clear() {
    for (const item of [...this.items]) this.drop(item);
    clearProblem(this.problems);
  }

  // No files are added or removed while a message is being sent or a reply runs.
  setDisabled(disabled) {
    this.disabled = disabled;
    this.button.disabled = disabled;
    for (const button of this.tray.querySelectorAll(".upload-remove")) button.disabled = disabled;
  }
}
