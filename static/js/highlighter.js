// Code colouring with highlight.js, which (129 KB of module) loads on the first code block
// instead of with the page. A block drawn before it is there shows as plain text, marked with
// the language it waits for, and is coloured in place when highlight.js arrives.

const MODULE = "/static/vendor/highlight.min.js";
const PENDING = "data-highlight"; // on a <code> waiting: its language, or "auto" (guess one)

let hljs = null; // the module's default export, once loaded
let loading = null;

function colour(code, language, guess) {
  if (language && hljs.getLanguage(language)) {
    code.innerHTML = hljs.highlight(code.textContent, { language, ignoreIllegals: true }).value; // escaped by hljs
  } else if (guess) {
    code.innerHTML = hljs.highlightAuto(code.textContent).value;
  }
}

function load() {
  loading ??= import(MODULE).then((module) => {
    hljs = module.default;
    for (const code of document.querySelectorAll(`code[${PENDING}]`)) {
      const wanted = code.getAttribute(PENDING);
      code.removeAttribute(PENDING);
      colour(code, wanted === "auto" ? "" : wanted, wanted === "auto");
    }
  });
  return loading;
}

// Colour `code` (its textContent) as `language`; with `guess`, an unknown or missing language
// is guessed. Now when highlight.js is loaded, else as soon as it is.
export function highlightCode(code, language, { guess = false } = {}) {
  if (hljs !== null) {
    colour(code, language, guess);
    return;
  }
  if (!language && !guess) return;
  code.setAttribute(PENDING, language || "auto");
  load();
}
