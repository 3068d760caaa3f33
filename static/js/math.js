// LaTeX math in answers with KaTeX: $…$, $$…$$ (inline or as a block), \(…\) and \[…\].
//
// How it stays as strict as the rest of render.js: marked's math tokens (the vendored
// marked-katex-extension's rules, plus \(…\) and \[…\]) are written as a placeholder,
// `<code class="language-katex">TeX, escaped</code>`, which the page's own DOMPurify config
// already keeps as text. After sanitising, each placeholder that is not inside a code block
// is replaced by KaTeX's rendering of its TeX, sanitised again by a DOMPurify instance of its
// own that keeps MathML only: no HTML, no class, no style, no link. KaTeX writes MathML (not
// its HTML layout, whose inline `style` attributes the page's CSP forbids), which Chromium,
// Firefox and Safari lay out natively. KaTeX runs with `trust: false` (no \href, \url,
// \htmlClass, \htmlData, \includegraphics), `throwOnError: false`, and bounded `maxSize`,
// `maxExpand` and TeX length, so a hostile or huge formula costs little and shows as text.

//
// KaTeX itself (600 KB of module) loads on the first formula, not with the page: the tokenizer
// (marked-katex.js, vendored without its KaTeX import by scripts/setup.sh) only writes
// placeholders, which show as their TeX until KaTeX is there and then become formulas in place.

import markedKatex from "/static/vendor/katex/marked-katex.js";
import DOMPurify from "/static/vendor/purify.es.js";

const KATEX_MODULE = "/static/vendor/katex/katex.mjs";
let katex = null; // the module's default export, once loaded
let loading = null;

const MAX_TEX_CHARS = 3000; // longer formulas show as their TeX
const CACHE_SIZE = 300; // rendered formulas kept (a growing answer renders them every frame)
const KATEX_OPTIONS = {
  output: "mathml",
  trust: false,
  throwOnError: false,
  strict: "ignore",
  maxSize: 20, // em: the largest box a formula may ask for
  maxExpand: 200, // macro expansions per formula
  globalGroup: false,
};

// Its own instance: the page's hooks (class only on code) stay as they are.
const mathPurify = DOMPurify(window);
const MATH_PURIFY = {
  USE_PROFILES: { mathMl: true },
  FORBID_TAGS: ["maction"], // interactive MathML: nothing a formula needs
  FORBID_ATTR: ["style", "class", "id", "href", "xlink:href", "src", "actiontype"],
  RETURN_DOM_FRAGMENT: true,
};

const cache = new Map();

function escapeText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function placeholder(token) {
  const kind = token.displayMode ? "language-katex-display" : "language-katex";
  return `<code class="${kind}">${escapeText(token.text)}</code>${token.type === "blockKatex" ? "\n" : ""}`;
}

// \(…\) inline and \[…\] display (marked would read `\(` as an escaped bracket).
const bracketRule = /^\\([[(])((?:\\[^]|[^\\])+?)\\([\])])/;
const bracketMath = {
  name: "bracketKatex",
  level: "inline",
  start(src) {
    const found = src.search(/\\[[(]/);
    return found < 0 ? undefined : found;
  },
  tokenizer(src) {
    const match = src.match(bracketRule);
    if (!match || (match[1] === "(") !== (match[3] === ")")) return undefined;
    return { type: "bracketKatex", raw: match[0], text: match[2].trim(), displayMode: match[1] === "[" };
  },
  renderer: placeholder,
};

// The marked extension: math tokens become placeholders.
export function mathExtension() {
  const { extensions } = markedKatex({});
  return { extensions: [bracketMath, ...extensions.map((extension) => ({ ...extension, renderer: placeholder }))] };
}

function rendered(tex, display) {
  const key = `${display ? "D" : "I"}${tex}`;
  let html = cache.get(key);
  if (html === undefined) {
    html = null;
    if (tex.length <= MAX_TEX_CHARS) {
      try {
        html = katex.renderToString(tex, { ...KATEX_OPTIONS, displayMode: display });
      } catch {
        html = null; // too deep for the parser (a RangeError), or a bug: the TeX shows as text
      }
    }
    if (cache.size >= CACHE_SIZE) cache.delete(cache.keys().next().value);
    cache.set(key, html);
  }
  return html === null ? null : mathPurify.sanitize(html, MATH_PURIFY);
}

// Load KaTeX once; then draw the formulas already on the page.
function loadKatex() {
  loading ??= import(KATEX_MODULE).then((module) => {
    katex = module.default;
    renderMath(document.body);
  });
  return loading;
}

// Replace the placeholders in a sanitised fragment by their formulas (not inside code blocks).
export function renderMath(root) {
  for (const code of root.querySelectorAll("code.language-katex, code.language-katex-display")) {
    if (code.closest("pre")) continue; // ```katex … ``` is code, shown as written
    if (katex === null) {
      loadKatex(); // the placeholder shows its TeX until then
      return;
    }
    const display = code.classList.contains("language-katex-display");
    const tex = code.textContent;
    const math = rendered(tex, display);
    const box = document.createElement(display ? "div" : "span");
    box.className = display ? "math-display" : "math-inline";
    if (math && math.querySelector("math")) {
      box.append(math);
    } else {
      box.classList.add("math-error");
      box.textContent = display ? `$$${tex}$$` : `$${tex}$`;
    }
    code.replaceWith(box);
  }
}
