// A message's files, as every message payload lists them ({id, filename, content_type,
// size}): images as thumbnails that open full size in a new tab, other files as a chip
// with name and size that downloads. The bytes come from the API (owner only), so the
// page's own address is the only image source.

const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
// A page with a fold at its top corner; drawn with lines so it follows the text colour.
const FILE_ICON = `<svg class="file-icon" viewBox="0 0 16 16" aria-hidden="true" focusable="false">
  <path d="M4 1.5h5.5L13 5v9.5H4z M9.5 1.5V5H13" fill="none" stroke="currentColor" stroke-width="1.2"/></svg>`;

export function isImage(contentType) {
  return IMAGE_TYPES.has(contentType);
}

export function fileIcon() {
  const holder = document.createElement("span");
  holder.innerHTML = FILE_ICON;
  return holder.firstElementChild;
}

// 1234567 -> "1.2 MB": what a person reads, not the exact count.
export function sizeText(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value >= 10 ? Math.round(value) : value.toFixed(1)} ${units[unit]}`;
}

function contentUrl(id) {
  return `/api/v1/files/${encodeURIComponent(id)}/content`;
}

// A file's name and size, as its chip and its upload show them.
export function nameAndSize(filename, bytes) {
  const name = document.createElement("span");
  name.className = "attachment-name";
  name.textContent = filename;
  const size = document.createElement("span");
  size.className = "attachment-size";
  size.textContent = sizeText(bytes);
  return [name, size];
}

// A file's chip: its icon, name and size.
function fileChip(chip, file) {
  chip.classList.add("file");
  chip.append(fileIcon(), ...nameAndSize(file.filename, file.size));
  return chip;
}

// A file without an id is named only: its bytes are not this page's to fetch (a shared
// page's reader), so images show as chips too.
function attachmentLink(file) {
  if (!file.id) {
    const chip = document.createElement("span");
    chip.className = "attachment named";
    chip.title = `${file.filename} (${sizeText(file.size)}), not available here`;
    return fileChip(chip, file);
  }
  const link = document.createElement("a");
  link.href = contentUrl(file.id);
  link.className = "attachment";
  link.dataset.fileId = file.id;
  link.title = `${file.filename} (${sizeText(file.size)})`;
  if (isImage(file.content_type)) {
    link.classList.add("image");
    link.target = "_blank";
    link.rel = "noopener";
    const image = document.createElement("img");
    image.src = contentUrl(file.id);
    image.alt = file.filename;
    image.loading = "lazy";
    image.decoding = "async";
    link.append(image);
    return link;
  }
  link.download = file.filename;
  return fileChip(link, file);
}

// Draw (or redraw) `element`'s files under its text; a message drawn twice with the same
// files is left as it is, so its images are not fetched again.
export function showAttachments(element, attachments) {
  const files = Array.isArray(attachments) ? attachments : [];
  const content = element.querySelector(":scope > .content");
  let box = element.querySelector(":scope > .attachments");
  const ids = files.map((file) => file.id).join(",");
  if (box && box.dataset.ids === ids) return;
  if (box) box.remove();
  if (!files.length || !content) return;
  content.after(attachmentsBox(files));
}

// The files as a group of thumbnails and chips (a message's, or a tool result's).
export function attachmentsBox(files) {
  const box = document.createElement("div");
  box.className = "attachments";
  box.dataset.ids = files.map((file) => file.id).join(",");
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", files.length === 1 ? "1 attached file" : `${files.length} attached files`);
  box.append(...files.map(attachmentLink));
  return box;
}

// The ids of the files a drawn message carries, in order (an edit keeps them).
export function attachmentIds(element) {
  const box = element.querySelector(":scope > .attachments");
  return box && box.dataset.ids ? box.dataset.ids.split(",") : [];
}
