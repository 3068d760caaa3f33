// The admin's Users dialog: every user (role, disabled, password, tokens), a form to create one
// (a password and/or a first token), and for the user being managed: disable or enable, their
// role, reset the password, their tokens (create, with the secret shown once, and revoke). The server
// refuses anyone but an admin (403), whatever this page shows. Its Model section shows each
// provider as /health reports it: the operator's details a user's chat never shows (what the
// last failed call saw, the circuit, what to change).

import { button, drawTokens, hideSecret, openDialog, opener, say, showSecret } from "/static/js/accounts.js";
import { api } from "/static/js/api.js";

const $ = (id) => document.getElementById(id);

let managed = null; // the user whose detail is open

function badge(text, kind = "") {
  const node = document.createElement("span");
  node.className = `badge ${kind}`.trim();
  node.textContent = text;
  return node;
}

function drawUsers(users) {
  const items = users.map((user) => {
    const item = document.createElement("li");
    item.className = "account-item";
    if (user.disabled_at) item.classList.add("is-disabled");
    const main = document.createElement("span");
    main.className = "item-main";
    const name = document.createElement("strong");
    name.textContent = user.name;
    main.append(name, badge(user.role));
    if (user.disabled_at) main.append(badge("disabled", "badge-off"));
    main.append(badge(user.has_password ? "password" : "no password"), badge(`${user.tokens} token${user.tokens === 1 ? "" : "s"}`));
    const manage = button("Manage", () => openUser(user));
    manage.setAttribute("aria-label", `Manage ${user.name}`);
    const toggle = button(user.disabled_at ? "Enable" : "Disable", () => setDisabled(user, !user.disabled_at));
    toggle.setAttribute("aria-label", `${user.disabled_at ? "Enable" : "Disable"} ${user.name}`);
    item.append(main, manage, toggle);
    return item;
  });
  $("admin-user-list").replaceChildren(...items);
}

async function loadUsers() {
  try {
    const { users } = await api("GET", "/api/admin/users");
    drawUsers(users);
    if (managed) managed = users.find((user) => user.id === managed.id) || null;
    return users;
  } catch (error) {
    say("admin-status", `Could not load the users: ${error.message}`, true);
    return [];
  }
}

async function setDisabled(user, disabled) {
  try {
    await api("PATCH", `/api/admin/users/${user.id}`, { disabled });
    say("admin-status", `${user.name} is ${disabled ? "disabled: their sign-ins ended and their tokens are refused" : "enabled again"}.`);
  } catch (error) {
    say("admin-status", error.message, true);
  }
  await loadUsers();
  const again = [...$("admin-user-list").querySelectorAll("button")].find(
    (node) => node.getAttribute("aria-label") === `${disabled ? "Enable" : "Disable"} ${user.name}`,
  );
  if (again) again.focus();
}

async function loadUserTokens() {
  if (!managed) return;
  try {
    const { tokens } = await api("GET", `/api/admin/users/${managed.id}/tokens`);
    drawTokens("admin-token-list", tokens, revokeUserToken);
  } catch (error) {
    say("admin-status", error.message, true);
  }
}

async function revokeUserToken(token) {
  try {
    await api("DELETE", `/api/admin/users/${managed.id}/tokens/${token.id}`);
    say("admin-status", `Revoked a token of ${managed.name}.`);
  } catch (error) {
    say("admin-status", error.message, true);
  }
  await loadUserTokens();
  await loadUsers();
  $("admin-token-label").focus();
}

function openUser(user) {
  managed = user;
  hideSecret("admin-secret-box");
  $("admin-detail-title").textContent = `Manage ${user.name}`;
  $("admin-role").value = user.role;
  $("admin-user-detail").hidden = false;
  loadUserTokens();
  $("admin-reset-password").focus();
}

async function createUser(event) {
  event.preventDefault();
  const password = $("admin-new-password").value;
  const body = {
    name: $("admin-new-name").value.trim(),
    role: $("admin-new-role").value,
    password: password || null,
    token: $("admin-new-token").checked,
  };
  try {
    const made = await api("POST", "/api/admin/users", body);
    event.target.reset();
    say("admin-status", `Created ${made.user.name}.`);
    await loadUsers();
    if (made.token) showSecret("admin-secret-box", made.token, `${made.user.name}'s`);
  } catch (error) {
    say("admin-status", error.message, true);
    $("admin-new-name").focus();
  }
}

async function changeRole(event) {
  event.preventDefault();
  const role = $("admin-role").value;
  try {
    await api("PATCH", `/api/admin/users/${managed.id}`, { role });
    say("admin-status", `${managed.name} is now ${"aeiou".includes(role[0]) ? "an" : "a"} ${role}.`);
  } catch (error) {
    say("admin-status", error.message, true);
    $("admin-role").value = managed.role;
  }
  await loadUsers();
}

async function resetPassword(event) {
  event.preventDefault();
  try {
    await api("PATCH", `/api/admin/users/${managed.id}`, { password: $("admin-reset-password").value });
    event.target.reset();
    say("admin-status", `New password set for ${managed.name}; their password sign-ins ended.`);
  } catch (error) {
    say("admin-status", error.message, true);
  }
  await loadUsers();
}

async function createUserToken(event) {
  event.preventDefault();
  try {
    const label = $("admin-token-label").value.trim() || null;
    const made = await api("POST", `/api/admin/users/${managed.id}/tokens`, { label });
    event.target.reset();
    say("admin-status", "");
    showSecret("admin-secret-box", made.token, `${managed.name}'s`);
  } catch (error) {
    say("admin-status", error.message, true);
  }
  await loadUserTokens();
  await loadUsers();
}

function modelItem(entry) {
  const item = document.createElement("li");
  item.className = "account-item model-item";
  const main = document.createElement("span");
  main.className = "item-main";
  const name = document.createElement("strong");
  name.textContent = `${entry.model || "?"} (${entry.name})`;
  main.append(name, badge(entry.ok ? "answers" : "down", entry.ok ? "" : "badge-off"));
  if (entry.breaker) main.append(badge(`circuit ${entry.breaker.state}`, entry.breaker.state === "closed" ? "" : "badge-off"));
  const lines = [`Probe: ${entry.detail}`];
  const failed = entry.last_failure;
  if (failed) lines.push(`Last failed call (${failed.at}): ${failed.failure}${failed.status_code ? `, HTTP ${failed.status_code}` : ""}: ${failed.detail}`);
  if (entry.hint) lines.push(`To fix it: ${entry.hint}`);
  const text = document.createElement("span");
  text.className = "muted model-detail";
  text.textContent = lines.join(" · ");
  item.append(main, text);
  return item;
}

async function loadModel() {
  try {
    const response = await fetch("/health", { headers: { Accept: "application/json" } });
    const health = await response.json();
    $("admin-model-list").replaceChildren(...health.provider.chain.map(modelItem));
  } catch (error) {
    say("admin-status", `Could not read /health: ${error.message}`, true);
  }
}

async function openAdmin(event) {
  managed = null;
  $("admin-user-detail").hidden = true;
  say("admin-status", "");
  hideSecret("admin-secret-box");
  openDialog($("admin-dialog"), opener(event, "admin-button"));
  $("admin-new-name").focus();
  await Promise.all([loadUsers(), loadModel()]);
}

export function initAdmin() {
  $("admin-button").addEventListener("click", openAdmin);
  $("drawer-admin-button").addEventListener("click", openAdmin);
  $("admin-create-form").addEventListener("submit", createUser);
  $("admin-role-form").addEventListener("submit", changeRole);
  $("admin-reset-form").addEventListener("submit", resetPassword);
  $("admin-token-form").addEventListener("submit", createUserToken);
}
