// The Account dialog (change the password, create and revoke API tokens), and what admin.js
// shares with it: opening a modal dialog that gives the focus back to its opener when it
// closes, a new token's secret shown once with a Copy button, and a list of tokens.
// Everything is drawn with textContent: no server text becomes markup.

import { api } from "/static/js/api.js";

const $ = (id) => document.getElementById(id);

let currentUser = null;

// Open `dialog` as a modal (the rest of the page is inert, Escape closes it); the focus goes
// back to `opener` when it closes, however it closes (or to the drawer's toggle, when the
// opener was in the phone's drawer and the drawer has closed meanwhile).
export function openDialog(dialog, opener) {
  if (dialog.open) return;
  dialog.showModal();
  dialog.addEventListener(
    "close",
    () => (opener.checkVisibility({ visibilityProperty: true }) ? opener : $("sessions-toggle")).focus(),
    { once: true },
  );
}

// The button that opened a dialog: the top bar's, or the drawer's on a phone.
export function opener(event, fallback) {
  return event && event.currentTarget instanceof HTMLElement ? event.currentTarget : $(fallback);
}

function wireClose(dialog) {
  dialog.querySelector(".dialog-close").addEventListener("click", () => dialog.close());
}

function when(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function button(text, onClick, className = "") {
  const node = element("button", className, text);
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
}

export function say(statusId, text, failed = false) {
  const status = $(statusId);
  status.textContent = text;
  status.classList.toggle("error-text", failed);
}

// A new token's secret, shown this once, with a Copy button (the clipboard API, or selecting
// the text for the user to copy where the page is not a secure context).
export function showSecret(boxId, secret, whose) {
  const box = $(boxId);
  const inputId = `${boxId}-value`;
  const note = element("p", "secret-note");
  note.append(element("strong", "", `Copy ${whose} new token now: it is shown only once.`));
  const label = element("label", "", "Token");
  label.htmlFor = inputId;
  const field = element("input", "mono secret-value");
  field.id = inputId;
  field.readOnly = true;
  field.value = secret;
  const copied = element("p", "form-status");
  copied.setAttribute("role", "status");
  const copy = button("Copy", async () => {
    field.select();
    copied.textContent = "Copying…";
    try {
      await navigator.clipboard.writeText(secret);
      copied.textContent = "Copied.";
    } catch {
      copied.textContent = "Press Ctrl+C (or ⌘C) to copy the selected token.";
    }
  });
  const row = element("div", "row");
  row.append(label, field, copy);
  box.replaceChildren(note, row, copied);
  box.hidden = false;
  field.focus();
  field.select();
}

export function hideSecret(boxId) {
  $(boxId).replaceChildren();
  $(boxId).hidden = true;
}

// Draw `tokens` into the list `listId`; each has a Revoke button calling `revoke(token)`.
export function drawTokens(listId, tokens, revoke) {
  const items = tokens.map((token) => {
    const item = element("li", "account-item");
    const main = element("span", "item-main");
    main.append(element("strong", "", token.label || "(no label)"), element("span", "muted", ` created ${when(token.created_at)}`));
    const revokeButton = button("Revoke", () => revoke(token));
    revokeButton.setAttribute("aria-label", `Revoke token ${token.label || token.id}`);
    item.append(main, revokeButton);
    return item;
  });
  if (!items.length) items.push(element("li", "muted", "No tokens."));
  $(listId).replaceChildren(...items);
}

async function loadTokens() {
  try {
    const { tokens } = await api("GET", "/api/tokens");
    drawTokens("token-list", tokens, revokeToken);
  } catch (error) {
    say("tokens-status", `Could not load your tokens: ${error.message}`, true);
  }
}

async function revokeToken(token) {
  try {
    await api("DELETE", `/api/tokens/${token.id}`);
    say("tokens-status", `Revoked ${token.label || "the token"}.`);
  } catch (error) {
    say("tokens-status", `Could not revoke it: ${error.message}`, true);
  }
  await loadTokens();
  $("token-label").focus();
}

async function createToken(event) {
  event.preventDefault();
  try {
    const made = await api("POST", "/api/tokens", { label: $("token-label").value.trim() || null });
    $("token-label").value = "";
    say("tokens-status", "");
    showSecret("token-secret-box", made.token, "your");
  } catch (error) {
    say("tokens-status", `Could not create a token: ${error.message}`, true);
  }
  await loadTokens();
}

async function changePassword(event) {
  event.preventDefault();
  const current = $("password-current").value;
  const fresh = $("password-new").value;
  if (fresh !== $("password-repeat").value) {
    say("password-status", "The two new passwords differ.", true);
    $("password-repeat").focus();
    return;
  }
  try {
    await api("POST", "/api/me/password", { current, new: fresh });
  } catch (error) {
    const wrong = error.code === "invalid_credentials";
    say("password-status", wrong ? "The current password is wrong." : error.message, true);
    (wrong ? $("password-current") : $("password-new")).focus();
    return;
  }
  event.target.reset();
  say("password-status", "Password changed. Your other password sign-ins have ended.");
}

function openAccount(event) {
  const dialog = $("account-dialog");
  $("account-who").textContent = currentUser ? `Signed in as ${currentUser.name} (${currentUser.role}).` : "";
  for (const id of ["password-status", "tokens-status"]) say(id, "");
  hideSecret("token-secret-box");
  openDialog(dialog, opener(event, "account-button"));
  loadTokens();
  $("password-current").focus();
}

// Who is signed in (null: nobody): the Admin button shows for admins only.
export function setAccountUser(user) {
  currentUser = user;
  for (const id of ["admin-button", "drawer-admin-button"]) $(id).hidden = !user || user.role !== "admin";
  for (const id of ["account-dialog", "admin-dialog"]) if (!user && $(id).open) $(id).close();
}

export function initAccounts() {
  wireClose($("account-dialog"));
  wireClose($("admin-dialog"));
  $("account-button").addEventListener("click", openAccount);
  $("drawer-account-button").addEventListener("click", openAccount);
  $("password-form").addEventListener("submit", changePassword);
  $("token-form").addEventListener("submit", createToken);
  // a new secret is not left on screen once the dialog closes
  $("account-dialog").addEventListener("close", () => hideSecret("token-secret-box"));
  $("admin-dialog").addEventListener("close", () => hideSecret("admin-secret-box"));
}
