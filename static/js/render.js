// Rendering of messages: Markdown -> sanitised DOM, highlighted code with a copy button
// (tool blocks: toolblocks.js). Nothing from a model or a tool is ever inserted
// as HTML without DOMPurify; every other string goes in through textContent.

import { Marked } from "/static/vendor/marked.esm.js";
import DOMPurify from "/static/vendor/purify.es.js";
import { highlightCode } from "/static/js/highlighter.js";
import { mathExtension, renderMath } from "/static/js/math.js";

const markdown = new Marked({ gfm: true, breaks: true, async: false });

// Raw HTML in model text is text: `List<String>` and `a<b and b>c` show as written. marked
// hands every HTML token (inline and block) to this renderer; it writes it escaped, so
// Markdown formatting still works and DOMPurify below never has to strip a tag from it.
markdown.use({
  renderer: {
    html({ text, block }) {
      const escaped = escapeHtml(text);
      return block ? `<p>${escaped.replace(/\n+$/, "").replace(/\n/g, "<br>")}</p>\n` : escaped;
    },
  },
});
markdown.use(mathExtension()); // LaTeX: math.js

export function escapeHtml(text) {
  return String(text ?? "")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

const PURIFY_CONFIG = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
  FORBID_ATTR: ["style", "id", "srcset", "action", "formaction"],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

// Classes only as marked writes them on code (`language-x`): model text cannot borrow the UI's styles.
DOMPurify.addHook("uponSanitizeAttribute", (node, data) => {
  if (data.attrName === "class" && !(node.tagName === "CODE" && /^language-[\w+#.-]+$/.test(data.attrValue))) {
    data.keepAttr = false;
  }
});

// Links open in a new tab without opener; images only from this origin or data: URLs.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
  if (node.tagName === "IMG") {
    const src = node.getAttribute("src") || "";
    if (!(src.startsWith("/") && !src.startsWith("//")) && !src.startsWith("data:image/")) {
      node.removeAttribute("src");
    }
    node.setAttribute("loading", "lazy");
  }
});

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

// Markdown text -> a sanitised DocumentFragment (with highlighted code blocks). `live`: an
// answer still being written (re-rendered once per frame): no language guessing, which is
// slow and would make an unlabelled block change colours while it grows. An unfinished
// code fence simply runs to the end of the text, as CommonMark says.
export function renderMarkdown(text, { live = false } = {}) {
  const html = markdown.parse(String(text ?? ""));
  const fragment = DOMPurify.sanitize(html, PURIFY_CONFIG);
  renderMath(fragment);
  enhanceCode(fragment, live);
  return fragment;
}

// Make `target`'s children from index `from` on those of `fragment`, keeping the leading ones
// that did not change (a growing answer re-renders without its earlier paragraphs, images or
// code blocks flickering).
export function morph(target, fragment, from = 0) {
  const next = [...fragment.childNodes];
  const current = [...target.childNodes].slice(from);
  let same = 0;
  while (same < next.length && same < current.length && current[same].isEqualNode(next[same])) same += 1;
  for (const node of current.slice(same)) node.remove();
  target.append(...next.slice(same));
}

function enhanceCode(root, live = false) {
  for (const code of root.querySelectorAll("pre > code")) {
    const pre = code.parentElement;
    const language = [...code.classList].find((name) => name.startsWith("language-"));
    const name = language ? language.slice("language-".length) : "";
    highlightCode(code, name, { guess: !live });
    code.classList.add("hljs");
    const wrapper = el("div", { class: "code-block" });
    const bar = el("div", { class: "code-bar" }, el("span", { class: "code-lang", text: name || "code" }));
    const copy = el("button", { type: "button", class: "copy-button", "aria-label": "Copy code", text: "Copy" });
    copy.addEventListener("click", () => copyText(code.textContent, copy));
    bar.append(copy);
    pre.replaceWith(wrapper);
    wrapper.append(bar, pre);
  }
}

// Where the finished part of a growing Markdown text ends: the start of the last line that
// begins a new top-level block (unindented, after a blank line, outside a code fence),
// searched from `from` (itself such a start, or 0). What comes before it renders the same
// whatever is appended (bar reference links defined later, which models do not write), so a
// streamed answer draws it once and re-renders only the rest, each frame.
export function settledLength(text, from = 0) {
  let settled = from;
  let fence = null; // the open fence's marker ("```" or "~~~", at least, or "$$"), or null
  let blank = false;
  let at = from;
  while (at < text.length) {
    const end = text.indexOf("\n", at);
    if (end === -1) break; // the last line is still being written
    const line = text.slice(at, end);
    const marker = /^ {0,3}(`{3,}|~{3,}|\$\$\s*$)/.exec(line); // code fences, and display math (math.js)
    if (fence) {
      const closes = marker && marker[1][0] === fence[0] && marker[1].trim().length >= fence.length;
      if (closes && !line.trim().slice(marker[1].trim().length)) fence = null;
    } else {
      if (blank && /^\S/.test(line)) settled = at;
      if (marker) fence = marker[1].trim();
    }
    blank = !fence && !line.trim();
    at = end + 1;
  }
  return settled;
}

export async function copyText(text, button) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    const area = el("textarea", { class: "visually-hidden", "aria-hidden": "true" });
    area.value = text;
    document.body.append(area);
    area.select();
    ok = document.execCommand("copy");
    area.remove();
  }
  if (button) {
    button.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => (button.textContent = "Copy"), 1500);
  }
}

export function badge(ok, code) {
  return el("span", { class: `badge ${ok ? "badge-ok" : "badge-error"}`, text: ok ? "ok" : code || "error" });
}

export function formatMs(ms) {
  if (typeof ms !== "number" || Number.isNaN(ms)) return "";
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}
