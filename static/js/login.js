// Signing in and out, and booting the page: a name and password, or an API token, is traded for
// an HttpOnly session cookie (`POST /api/login`, the form's modes in signin.js); the page then
// opens the last chat (or the newest, or a new one).

import { setAccountUser } from "/static/js/accounts.js";
import { api, ApiError } from "/static/js/api.js";
import { updateComposer } from "/static/js/composer.js";
import { flash, messageList } from "/static/js/messages.js";
import { loadSessions, openSession, startNewChat } from "/static/js/sessions.js";
import { LAST_SESSION_KEY, loading, state } from "/static/js/state.js";
import { focusSignIn, initSignIn, loadSignInOptions, submitSignIn } from "/static/js/signin.js";
import { closeTurns } from "/static/js/turns.js";

const $ = (id) => document.getElementById(id);

export async function boot() {
  // Asked together with /api/me, not after it: one round trip less before the chat shows
  // (signed out, both answer 401 and the list is dropped).
  const sessions = api("GET", "/sessions").catch(() => null);
  try {
    state.user = await api("GET", "/api/me");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return showLogin();
    return showLogin(`Cannot reach the server: ${error.message}`);
  }
  showApp(sessions);
}

function showLogin(message = "") {
  $("app-view").hidden = true;
  $("login-view").hidden = false;
  $("login-error").textContent = message;
  focusSignIn();
  loadSignInOptions().then(() => {
    $("login-error").textContent = message; // loading the options redraws the form
  });
}

async function showApp(sessions = null) {
  $("login-view").hidden = true;
  $("app-view").hidden = false;
  // The focus moves at once: hiding the sign-in form took it from the field it was on, and
  // leaving it on <body> while the chats load would lose a keyboard user's place.
  $("composer-input").focus();
  $("user-name").textContent = state.user.name;
  setAccountUser(state.user);
  loading(true);
  try {
    await loadSessions(sessions);
    const last = localStorage.getItem(LAST_SESSION_KEY);
    const initial = state.sessions.find((session) => session.id === last) || state.sessions[0];
    if (initial) await openSession(initial.id);
    else startNewChat();
  } catch (error) {
    flash(`Could not load your conversations: ${error.message}`);
  } finally {
    loading(false);
  }
  $("composer-input").focus();
  // The chat is usable: conversations listed, the chat open, the message box ready (bench/ui.py).
  if (!performance.getEntriesByName("chat-usable").length) performance.mark("chat-usable");
}

// Sign out on the server first: while its session cookie is still valid the page stays signed
// in and says why (a 401 means the session had already ended).
async function signOut() {
  try {
    await api("POST", "/api/logout");
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) {
      flash(`Could not sign out: ${error.message}. You are still signed in; try again.`);
      return;
    }
  }
  closeTurns(); // the turns go on on the server
  state.user = null;
  setAccountUser(null);
  state.sessionId = null;
  state.view += 1;
  messageList().replaceChildren();
  updateComposer();
  showLogin();
}

export function initLogin() {
  initSignIn();
  $("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const user = await submitSignIn();
    if (!user) return;
    state.user = user;
    showApp();
  });
  for (const id of ["logout-button", "drawer-logout-button"]) $(id).addEventListener("click", signOut);
}
