// Assistant replies are Markdown written by a model: parsed by marked, then sanitised by
// DOMPurify before they touch the page, so HTML in a reply can never run script.
import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const marked = new Marked({ gfm: true, breaks: true, async: false });

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

const PURIFY = {
  USE_PROFILE: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "dialog"],
  FORBID_ATTR: ["style"],
};

export function renderMarkdown(text) {
  return DOMPurify.sanitize(marked.parse(text || ""), PURIFY);
}
