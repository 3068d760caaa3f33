// The chat web UI's entry point: it wires the page's modules together and boots. Each concern
// has its module: login.js (signing in and out, booting), sessions.js (the conversations list),
// history.js (the message list and its pages), turns.js (turns in progress and where their
// messages go), send.js (sending and Retry), turn_errors.js (how a failed turn is said),
// answer.js (answering a widget), state.js (which chat is on screen); live.js is one turn in
// progress, messages.js draws stored messages. Their imports go one way, with no cycle
// (tests/ui/test_js_modules.py): history.js imports turns.js and sessions.js, turns.js imports
// sessions.js; the one call the other way, showMessages, goes through show_messages.js, which
// history.js fills in at start-up.

import { initAccounts } from "/static/js/accounts.js";
import { initAdmin } from "/static/js/admin.js";
import { answerWidget } from "/static/js/answer.js";
import { initChatSearch } from "/static/js/chat_search.js";
import { initChatTransfer } from "/static/js/chat_transfer.js";
import { initComposer } from "/static/js/composer.js";
import { initFollow } from "/static/js/follow.js";
import { initGenerate } from "/static/js/generate.js";
import { initHistory } from "/static/js/history.js";
import { initLayout } from "/static/js/layout.js";
import { boot, initLogin } from "/static/js/login.js";
import { initMemories } from "/static/js/memories.js";
import { setWidgetHandler } from "/static/js/messages.js";
import { initCodePanel, initProblemsPanel, loadActivity } from "/static/js/panels.js";
import { send } from "/static/js/send.js";
import { initSessions, refreshSessions } from "/static/js/sessions.js";
import { initSettings } from "/static/js/settings.js";
import { idle } from "/static/js/state.js";
import { initStatus } from "/static/js/status.js";
import { initTasksPanel } from "/static/js/tasks.js";
import { initTurns } from "/static/js/turns.js";
import { initVersions } from "/static/js/versions.js";

initLogin();
initFollow();
initAccounts(); // the Account and Admin dialogs (accounts.js, admin.js)
initAdmin();
initSessions();
initChatSearch();
initChatTransfer();
initHistory();
initTurns();
setWidgetHandler(answerWidget);
initVersions();
initComposer({ canSend: idle, onSend: (text, files) => send(text, files) });
initLayout();
initCodePanel();
initProblemsPanel();
initGenerate((activityId) => {
  loadActivity(activityId);
  refreshSessions(); // the job made a "Practice: …" chat
});
initTasksPanel();
initSettings();
initStatus();
initMemories();
boot();
