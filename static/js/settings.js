// The Settings dialog (SPEC 17): theme, the model of the chat on screen, a personal addition to
// the system prompt, and which tools ask before they run (within the operator's TOOL_APPROVAL).
// Each control saves through the API as soon as it changes (the instructions with their own
// button) and applies at once. The theme is also mirrored to localStorage, which
// theme_boot.js reads before the first paint of the next page load.
//
// The dialog is a modal <dialog>: the page behind it is inert, Tab and Shift+Tab cycle inside
// it, Escape closes it, and the focus goes back to the gear button.

import { api } from "/static/js/api.js";
import { state } from "/static/js/state.js";

export const THEME_KEY = "orchestrator.theme";
const THEMES = [
  ["system", "Follow the system"],
  ["light", "Light"],
  ["dark", "Dark"],
];
const $ = (id) => document.getElementById(id);

const DIALOG = `
<form id="settings-form" class="settings-form" novalidate>
  <div class="settings-head">
    <h2 id="settings-title">Settings</h2>
    <button id="settings-close" type="button" class="icon-button" aria-label="Close settings">✕</button>
  </div>
  <fieldset class="settings-group">
    <legend>Theme</legend>
    <div id="settings-themes" class="settings-themes"></div>
  </fieldset>
  <div class="settings-group">
    <label for="settings-model" class="settings-label">Model for this chat</label>
    <select id="settings-model" aria-describedby="settings-model-note"></select>
    <p id="settings-model-note" class="muted settings-note"></p>
  </div>
  <div class="settings-group">
    <label for="settings-prompt" class="settings-label">Your instructions for every answer</label>
    <p id="settings-prompt-help" class="muted settings-note">Added to the assistant's instructions in your chats
      (for example your language, or how long answers should be). They never change what tools do.</p>
    <textarea id="settings-prompt" rows="4" aria-describedby="settings-prompt-help settings-prompt-count"></textarea>
    <div class="settings-row">
      <span id="settings-prompt-count" class="muted settings-note" aria-live="polite"></span>
      <button id="settings-prompt-save" type="submit">Save instructions</button>
    </div>
  </div>
  <fieldset class="settings-group">
    <legend>Ask me before a tool runs</legend>
    <p class="muted settings-note">The operator decides which tools always ask; you can add more.</p>
    <div class="settings-check">
      <input id="settings-ask-all" type="checkbox">
      <label for="settings-ask-all">Ask before every tool</label>
    </div>
    <ul id="settings-tools" class="settings-tools" aria-label="Tools"></ul>
  </fieldset>
  <p id="settings-status" class="settings-status" role="status"></p>
</form>`;

let current = null; // the settings as the server last answered them
let opener = null;

export function applyTheme(theme) {
  if (theme === "light" || theme === "dark") document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
  try {
    if (theme === "light" || theme === "dark") localStorage.setItem(THEME_KEY, theme);
    else localStorage.removeItem(THEME_KEY);
  } catch {
    // storage refused: the server still has the choice
  }
}

function say(text) {
  $("settings-status").textContent = text;
}

async function save(body, done = "Saved.") {
  say("Saving…");
  try {
    current = await api("PATCH", "/api/settings", body);
    say(done);
    return true;
  } catch (error) {
    say(`Not saved: ${error.message}`);
    return false;
  }
}

function drawThemes() {
  const box = $("settings-themes");
  box.replaceChildren();
  for (const [value, label] of THEMES) {
    const row = document.createElement("div");
    row.className = "settings-check";
    const input = document.createElement("input");
    Object.assign(input, { type: "radio", name: "theme", id: `settings-theme-${value}`, value });
    input.checked = current.theme === value;
    input.addEventListener("change", async () => {
      applyTheme(value);
      await save({ theme: value }, `Theme: ${label.toLowerCase()}.`);
    });
    const text = document.createElement("label");
    text.htmlFor = input.id;
    text.textContent = label;
    row.append(input, text);
    box.append(row);
  }
}

function countPrompt() {
  const max = current ? current.system_prompt_max : 4000;
  const length = $("settings-prompt").value.length;
  $("settings-prompt-count").textContent = `${length} / ${max} characters`;
}

function drawTools() {
  const list = $("settings-tools");
  list.replaceChildren();
  const all = current.approval.every_command;
  $("settings-ask-all").checked = all;
  for (const row of current.commands) {
    const item = document.createElement("li");
    item.className = "settings-check";
    const input = document.createElement("input");
    Object.assign(input, { type: "checkbox", id: `settings-tool-${row.command}`, value: row.command });
    input.checked = row.asks === "always";
    input.disabled = row.locked || all;
    const label = document.createElement("label");
    label.htmlFor = input.id;
    const name = document.createElement("code");
    name.textContent = `/${row.command}`;
    label.append(name);
    const why = row.locked ? row.reason : all ? "you ask before every tool" : row.reason;
    if (why) {
      const note = document.createElement("span");
      note.id = `settings-tool-${row.command}-why`;
      note.className = "muted settings-note";
      note.textContent = ` — ${why}`;
      input.setAttribute("aria-describedby", note.id);
      label.append(note);
    }
    input.addEventListener("change", saveTools);
    item.append(input, label);
    list.append(item);
  }
}

// "Every tool" keeps the user's own list as it was (its boxes only show what every-tool does);
// a command's box changes the list.
async function saveTools(event) {
  const every = $("settings-ask-all").checked;
  const commands =
    event.target.id === "settings-ask-all"
      ? [...current.approval.commands]
      : current.commands
          .filter((row) => !row.locked && $(`settings-tool-${row.command}`)?.checked)
          .map((row) => row.command);
  if (await save({ approval: { every_command: every, commands } })) drawTools();
}

async function drawModels() {
  const select = $("settings-model");
  const note = $("settings-model-note");
  select.replaceChildren();
  const fallback = new Option("Default (the configured order)", "");
  select.append(fallback);
  let models = [];
  try {
    models = (await api("GET", "/api/models")).models;
  } catch (error) {
    note.textContent = `Could not list the models: ${error.message}`;
  }
  for (const model of models) {
    const health = model.health === "down" ? " — not answering" : "";
    select.append(new Option(`${model.label}${model.default ? " (default)" : ""}${health}`, model.id));
  }
  if (!state.sessionId) {
    select.disabled = true;
    note.textContent = "Send a first message, then choose this chat's model.";
    return;
  }
  select.disabled = false;
  try {
    const session = await api("GET", `/sessions/${encodeURIComponent(state.sessionId)}`);
    select.value = session.model || "";
  } catch {
    select.value = "";
  }
  note.textContent = "The other models stay as fallbacks if it does not answer.";
}

async function chooseModel() {
  if (!state.sessionId) return;
  const model = $("settings-model").value || null;
  say("Saving…");
  try {
    await api("PATCH", `/sessions/${encodeURIComponent(state.sessionId)}`, { model });
    say(model ? "This chat now starts with the chosen model." : "This chat uses the configured order.");
  } catch (error) {
    say(`Not saved: ${error.message}`);
  }
}

// Tab and Shift+Tab stay inside the dialog (the page behind is inert, but the browser's own
// controls would otherwise take the focus out of it).
function trapFocus(event) {
  if (event.key === "Escape") {
    event.stopPropagation(); // layout.js's Escape must not also close a panel behind the dialog
    return;
  }
  if (event.key !== "Tab") return;
  const focusable = [...$("settings-dialog").querySelectorAll("button, input, select, textarea")].filter(
    (element) => !element.disabled && element.offsetParent !== null,
  );
  if (!focusable.length) return;
  const first = focusable[0];
  const last = focusable[focusable.length - 1];
  if (event.shiftKey && document.activeElement === first) {
    event.preventDefault();
    last.focus();
  } else if (!event.shiftKey && document.activeElement === last) {
    event.preventDefault();
    first.focus();
  }
}

export async function openSettings() {
  const dialog = $("settings-dialog");
  opener = document.activeElement;
  say("");
  try {
    current = await api("GET", "/api/settings");
  } catch (error) {
    say(`Could not load your settings: ${error.message}`);
    dialog.showModal();
    $("settings-close").focus();
    return;
  }
  drawThemes();
  $("settings-prompt").value = current.system_prompt;
  $("settings-prompt").maxLength = current.system_prompt_max;
  countPrompt();
  drawTools();
  dialog.showModal();
  $(`settings-theme-${current.theme}`).focus();
  await drawModels();
}

function closeSettings() {
  $("settings-dialog").close();
}

// After signing in: the theme saved on the server wins over this browser's copy.
async function syncTheme() {
  try {
    const saved = await api("GET", "/api/settings");
    applyTheme(saved.theme);
  } catch {
    // signed out, or the server is away: keep the copy
  }
}

export function initSettings() {
  const dialog = document.createElement("dialog");
  dialog.id = "settings-dialog";
  dialog.className = "settings-dialog";
  dialog.setAttribute("aria-labelledby", "settings-title");
  dialog.innerHTML = DIALOG;
  document.body.append(dialog);

  $("settings-open").addEventListener("click", openSettings);
  $("settings-close").addEventListener("click", closeSettings);
  dialog.addEventListener("keydown", trapFocus);
  dialog.addEventListener("close", () => {
    if (opener && document.contains(opener)) opener.focus();
    else $("settings-open").focus();
  });
  $("settings-prompt").addEventListener("input", countPrompt);
  $("settings-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    await save({ system_prompt: $("settings-prompt").value }, "Instructions saved.");
  });
  $("settings-ask-all").addEventListener("change", saveTools);
  $("settings-model").addEventListener("change", chooseModel);

  // #app-view is shown once the user is signed in (login.js): then the server's theme applies
  const app = $("app-view");
  new MutationObserver(() => {
    if (!app.hidden) syncTheme();
  }).observe(app, { attributes: true, attributeFilter: ["hidden"] });
}
