// The sign-in form's three modes: a name and password (the default), an API token ("Use an API
// token instead"), and sign-up, offered only when the server says it is on
// (GET /api/auth/options). The hidden mode's fieldset is disabled, so its `required` fields
// never block the form. login.js calls submitSignIn and shows the app on success.

import { api, ApiError } from "/static/js/api.js";

const $ = (id) => document.getElementById(id);

let mode = "password";
let signupOn = false;

function setMode(next) {
  mode = next;
  const token = next === "token";
  const signup = next === "signup";
  $("login-form").dataset.mode = next;
  $("login-token-fields").hidden = $("login-token-fields").disabled = !token;
  $("login-password-fields").hidden = $("login-password-fields").disabled = token;
  $("login-title").textContent = signup ? "Create an account" : "Sign in";
  $("login-submit").textContent = signup ? "Create account" : "Sign in";
  const password = $("login-password");
  password.autocomplete = signup ? "new-password" : "current-password";
  if (signup) password.minLength = 8;
  else password.removeAttribute("minlength");
  $("signup-hint").hidden = !signup;
  if (signup) password.setAttribute("aria-describedby", "signup-hint");
  else password.removeAttribute("aria-describedby");
  $("login-use-token").hidden = token;
  $("login-use-password").hidden = next === "password";
  $("login-use-password").textContent = signup ? "I have an account: sign in" : "Sign in with a name and password";
  $("signup-open").hidden = !signupOn || signup;
  $("login-error").textContent = "";
}

export function focusSignIn() {
  (mode === "token" ? $("login-token") : $("login-name")).focus();
}

// Ask the server whether sign-up is on (a failure just leaves the link hidden).
export async function loadSignInOptions() {
  try {
    signupOn = Boolean((await api("GET", "/api/auth/options")).signup);
  } catch {
    signupOn = false;
  }
  if (mode === "signup" && !signupOn) mode = "password";
  setMode(mode);
}

function explain(error) {
  if (!(error instanceof ApiError)) return error.message;
  switch (error.code) {
    case "invalid_credentials":
      return "Wrong name or password.";
    case "unauthorized":
      return "That token is not valid.";
    case "account_disabled":
      return "This account is disabled. Ask an admin to enable it.";
    case "name_taken":
      return "That name is taken: choose another.";
    case "signup_disabled":
      return "Sign-up is off on this server: ask an admin for an account.";
    case "busy":
      return "The server is busy checking sign-ins: try again in a few seconds.";
    default:
      return error.message;
  }
}

// Send the form in its current mode; the signed-in user, or null (the error is shown).
export async function submitSignIn() {
  let request;
  if (mode === "token") request = ["/api/login", { token: $("login-token").value.trim() }];
  else {
    const body = { name: $("login-name").value.trim(), password: $("login-password").value };
    request = [mode === "signup" ? "/api/signup" : "/api/login", body];
  }
  $("login-submit").disabled = true;
  try {
    const user = await api("POST", ...request);
    $("login-token").value = "";
    $("login-password").value = "";
    if (mode === "signup") setMode("password"); // signed up: next time, this form signs in
    return user;
  } catch (error) {
    $("login-error").textContent = explain(error);
    return null;
  } finally {
    $("login-submit").disabled = false;
  }
}

export function initSignIn() {
  const switchTo = (next) => () => {
    setMode(next);
    focusSignIn();
  };
  $("login-use-token").addEventListener("click", switchTo("token"));
  $("login-use-password").addEventListener("click", switchTo("password"));
  $("signup-open").addEventListener("click", switchTo("signup"));
  setMode("password");
}
