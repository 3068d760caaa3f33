// Export the chat on screen (Markdown, or the JSON document that Import reads) and import a
// JSON export as a new chat (POST /sessions/import; its caps are the server's: docs/api.md).

import { api } from "/static/js/api.js";
import { el } from "/static/js/render.js";
import { loadSessions, openSession } from "/static/js/sessions.js";
import { state } from "/static/js/state.js";

const $ = (id) => document.getElementById(id);
const MAX_IMPORT_BYTES = 8 * 1024 * 1024; // api/export.py IMPORT_MAX_BYTES

function say(text) {
  $("transfer-status").textContent = text;
}

function download(format) {
  if (!state.sessionId) {
    say("Open a chat to export it.");
    return;
  }
  // A plain link: the browser downloads the attachment with the session cookie.
  const link = el("a", { href: `/sessions/${encodeURIComponent(state.sessionId)}/export?format=${format}`, download: "" });
  document.body.append(link);
  link.click();
  link.remove();
  say(`Export started (${format === "json" ? "JSON" : "Markdown"}).`);
}

async function importFile(file) {
  if (file.size > MAX_IMPORT_BYTES) {
    say(`Import failed: the file is larger than ${MAX_IMPORT_BYTES / 1024 / 1024} MiB.`);
    return;
  }
  let document_;
  try {
    document_ = JSON.parse(await file.text());
  } catch {
    say("Import failed: the file is not a JSON chat export.");
    return;
  }
  try {
    const imported = await api("POST", "/sessions/import", document_);
    await loadSessions();
    await openSession(imported.session.id);
    say(`Imported “${imported.session.name}” (${imported.messages} messages).`);
  } catch (error) {
    say(`Import failed: ${error.message}`);
  }
}

export function initChatTransfer() {
  $("export-markdown").addEventListener("click", () => download("markdown"));
  $("export-json").addEventListener("click", () => download("json"));
  const input = $("import-input");
  $("import-chat").addEventListener("click", () => input.click());
  input.addEventListener("change", async () => {
    const [file] = input.files;
    input.value = "";
    if (file) await importFile(file);
  });
}
