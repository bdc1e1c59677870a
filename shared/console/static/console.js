// The operator console's page (docs/console.md): plain DOM, no framework, no build step.
//
// Every value the API returns may come from a message or a name an attacker chose. It only
// ever reaches the page as text (`el`'s string children become text nodes; `textContent`) or
// as the value of an attribute that cannot run anything (`title`, `datetime`, a `#/` link
// built with encodeURIComponent). Nothing here assigns innerHTML or builds markup from strings.

const TOKEN_KEY = "bus-console-token";
const SECRET_KEY = "bus-console-secret";
const PAGE_SIZES = [25, 50, 100, 200];
const DEFAULT_PAGE_SIZE = 50;
const OVERVIEW_REFRESH_MS = 15000;
const AGE_WARNING_SECONDS = 300;
const SVG = "http://www.w3.org/2000/svg";

// ---------------------------------------------------------------------------------------
// Credentials and requests

/** The token from the address (once: it moves to sessionStorage and leaves the address bar,
 * so it is neither bookmarked nor shown over a shoulder), the deployed function key, and the
 * deployed console's secret once typed into its sign-in (kept in this tab only, never put in
 * an address). */
function takeCredentials() {
  const url = new URL(window.location.href);
  const token = url.searchParams.get("token");
  if (token !== null) {
    sessionStorage.setItem(TOKEN_KEY, token);
    url.searchParams.delete("token");
    history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  }
  // The platform checks the function key on the page's own request too, so it stays in the
  // address: a reload must carry it again.
  return {
    token: sessionStorage.getItem(TOKEN_KEY),
    code: url.searchParams.get("code"),
    secret: sessionStorage.getItem(SECRET_KEY),
  };
}

const credentials = takeCredentials();

/** The API beside the page: at the console's root, wherever that is mounted (``/`` locally,
 * under the function's route when deployed). */
function consoleRoot() {
  const path = window.location.pathname;
  const folder = path.endsWith("/") ? path : path.replace(/[^/]*\.html$/, "");
  return new URL(folder.endsWith("/") ? folder : `${folder}/`, window.location.origin);
}

const apiBase = new URL("api/", consoleRoot());
/** `app`: the app of a system this tab looks at (`bus console --system`), null for one app's
 * console; every API request then names it. */
const state = { session: null, refreshTimer: null, renderId: 0, app: null };

/** `url` with the app of the system this tab looks at, when it looks at one. */
function forApp(url) {
  if (state.app !== null) url.searchParams.set("app", state.app);
  return url;
}

class ApiError extends Error {
  /** `signIn`: the server asks for the console's secret (absent or wrong). */
  constructor(status, message, signIn = false) {
    super(message);
    this.status = status;
    this.signIn = signIn;
  }
}

function headers(method) {
  const sent = { Accept: "application/json" };
  if (credentials.token) sent.Authorization = `Bearer ${credentials.token}`;
  if (credentials.code) sent["x-functions-key"] = credentials.code;
  if (credentials.secret) sent["X-Console-Secret"] = credentials.secret;
  if (method !== "GET") {
    sent["Content-Type"] = "application/json";
    sent["X-Console-CSRF"] = state.session ? state.session.csrf : "";
  }
  return sent;
}

/** One request to the console's API: its JSON answer, or an ApiError with the server's
 * {"error": ...} text. */
async function api(path, { method = "GET", body, query } = {}) {
  const url = forApp(new URL(path, apiBase));
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== null && value !== undefined) url.searchParams.set(name, value);
  }
  let response;
  try {
    response = await fetch(url, {
      method,
      headers: headers(method),
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, `the console's server cannot be reached (${e.message})`);
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const said = data && typeof data.error === "string" ? data.error : response.statusText;
    const signIn = response.status === 401 && data !== null && data.sign_in === "console-secret";
    throw new ApiError(response.status, `${response.status}: ${said}`, signIn);
  }
  return data;
}

/** Why the server refused a download (an altered or missing body, one too large for the
 * deployed console), as its JSON error says, else its status. */
async function refusal(response) {
  try {
    const answer = await response.json();
    if (answer && typeof answer.error === "string") return `${response.status}: ${answer.error}`;
  } catch (e) {
    // not JSON: the status says it
  }
  return `${response.status}: no body to save`;
}

/** Save the whole body of a parked message (the view shows only its beginning): fetched
 * with the tab's credentials, then handed to the browser as a file, never shown. */
async function downloadBody(endpoint, id) {
  const path = `failed/${encodeURIComponent(endpoint)}/${encodeURIComponent(id)}/body`;
  let response;
  try {
    response = await fetch(forApp(new URL(path, apiBase)), {
      headers: headers("GET"), credentials: "same-origin", cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, `the console's server cannot be reached (${e.message})`);
  }
  if (!response.ok) throw new ApiError(response.status, await refusal(response));
  let saved;
  try {
    saved = await response.blob();
  } catch (e) {
    // The server checked the body, then streams it: one changed meanwhile is cut short.
    throw new ApiError(0, `the download stopped before its end (${e.message}); try again`);
  }
  const link = el("a", { href: URL.createObjectURL(saved), download: `${endpoint}-${id}.json` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60000);
}

// ---------------------------------------------------------------------------------------
// Building the page: text only

/** An element; string children become text nodes, attributes are set one by one. */
function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? "" : String(value));
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
  return node;
}

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

function button(label, onClick, { kind } = {}) {
  const node = el("button", { type: "button", class: kind }, label);
  node.addEventListener("click", onClick);
  return node;
}

/** A link inside the page, its parts encoded so that a name cannot leave the fragment. */
function route(...parts) {
  return "#/" + parts.map(encodeURIComponent).join("/");
}

function routeWith(view, query) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== null && value !== undefined) params.set(name, String(value));
  }
  const search = params.toString();
  return `#/${view}${search ? "?" + search : ""}`;
}

function muted(text) {
  return el("span", { class: "muted" }, text);
}

function orUnknown(value) {
  return value === null || value === undefined || value === "" ? muted("(unknown)") : value;
}

function time(iso) {
  if (!iso) return muted("—");
  const shown = String(iso).replace("T", " ").replace(/\.\d+/, "").replace(/(\+00:00|Z)$/, " UTC");
  return el("time", { datetime: iso, title: iso }, shown);
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

function millis(value) {
  return value === null || value === undefined ? "—" : `${Math.round(value)} ms`;
}

function table(columns, rows, { empty, id, compact } = {}) {
  const head = el("thead", {}, el("tr", {}, columns.map((c) => el("th", { scope: "col" }, c))));
  const body = el("tbody", {}, rows);
  if (rows.length === 0 && empty) {
    body.append(el("tr", {}, el("td", { colspan: columns.length, class: "empty" }, empty)));
  }
  return el("table", { id, class: compact ? "compact" : null }, head, body);
}

// ---------------------------------------------------------------------------------------
// Banners and dialogs

function showError(error) {
  const banner = document.getElementById("banner");
  document.getElementById("banner-text").textContent =
    error instanceof ApiError ? error.message : `The page failed: ${error.message || error}`;
  banner.hidden = false;
}

function clearError() {
  document.getElementById("banner").hidden = true;
}

function showNotice(text) {
  document.getElementById("notice-text").textContent = text;
  document.getElementById("notice").hidden = false;
}

/** Resolves to the dialog's return value once it closes ("ok" or "cancel"). */
function dialogAnswer(dialog) {
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
  });
}

async function confirmed(text, okLabel) {
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  return (await dialogAnswer(document.getElementById("confirm-dialog"))) === "ok";
}

/** The reason typed in the discard dialog, or null when it was cancelled. */
async function discardReason(text) {
  document.getElementById("discard-text").textContent = text;
  const reason = document.getElementById("discard-reason");
  reason.value = "";
  const answer = await dialogAnswer(document.getElementById("discard-dialog"));
  return answer === "ok" && reason.value.trim() ? reason.value.trim() : null;
}

// ---------------------------------------------------------------------------------------
// Actions: replay and discard, each confirmed, each answered in the notice

function describe(selector) {
  if (selector.ids) {
    return selector.ids.length === 1
      ? `message ${selector.ids[0]} of ${selector.endpoint}`
      : `${selector.ids.length} messages of ${selector.endpoint}`;
  }
  const parts = [`every parked message of ${selector.endpoint}`];
  if (selector.type !== undefined) parts.push(`of type ${selector.type ?? "(unknown)"}`);
  if (selector.error_type !== undefined) {
    parts.push(`that failed with ${selector.error_type ?? "(unknown error)"}`);
  }
  return parts.join(" ");
}

async function replay(selector, count, { confirm = true, after } = {}) {
  const many = count === undefined ? "" : ` (${count})`;
  if (confirm && !(await confirmed(`Replay ${describe(selector)}${many}? Each is processed ` +
      "exactly once.", "Replay"))) return false;
  return act(async () => {
    const done = await api("replay", { method: "POST", body: selector });
    const why = Array.isArray(done.skipped_why) && done.skipped_why.length
      ? ` (${done.skipped_why.slice(0, 3).join("; ")})` : "";
    const skipped = done.skipped
      ? `; ${done.skipped} could not be replayed and stay parked${why}` : "";
    showNotice(`Replayed ${done.replayed} of ${describe(selector)}${skipped}. ` +
      `Action ${done.action}.${unfinished(done)}`);
  }, after);
}

async function discard(selector, count, { after } = {}) {
  const many = count === undefined ? "" : ` (${count})`;
  const reason = await discardReason(`Discard ${describe(selector)}${many}.`);
  if (reason === null) return false;
  return act(async () => {
    const done = await api("discard", { method: "POST", body: { ...selector, reason } });
    showNotice(`Discarded ${done.discarded} of ${describe(selector)} into the archive. ` +
      `Action ${done.action}.${unfinished(done)}`);
  }, after);
}

/** What an action says when its pass stopped before the end of the queue. */
function unfinished(done) {
  return done.complete === false
    ? " The pass stopped before the end of the queue (BUS_CONSOLE_LIST_LIMIT, or its time): " +
      "run it again for the rest." : "";
}

/** Runs one action; then ``after`` (by default, the view drawn again with what is left). */
async function act(perform, after = render) {
  clearError();
  try {
    await perform();
  } catch (e) {
    showError(e);
    render();
    return false;
  }
  after();
  return true;
}

function writable() {
  return state.session !== null && !state.session.read_only;
}

// ---------------------------------------------------------------------------------------
// Overview

function processedChart(points) {
  const width = 120;
  const height = 28;
  const counts = points.map((p) => p.count);
  const most = Math.max(1, ...counts);
  const total = counts.reduce((a, b) => a + b, 0);
  const chart = svg("svg", {
    class: "chart", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
  });
  const label = svg("title", {});
  label.textContent = `${total} processed in the last ${points.length} minutes`;
  chart.append(label);
  const slot = width / Math.max(1, points.length);
  points.forEach((point, i) => {
    const tall = point.count === 0 ? 0 : Math.max(1, (point.count / most) * height);
    const bar = svg("rect", {
      x: (i * slot + 0.5).toFixed(1), y: (height - tall).toFixed(1),
      width: Math.max(1, slot - 1).toFixed(1), height: tall.toFixed(1),
    });
    const tip = svg("title", {});
    tip.textContent = `${point.minute}: ${point.count}`;
    bar.append(tip);
    chart.append(bar);
  });
  return el("span", { class: "throughput" }, chart, el("span", { class: "total" }, String(total)));
}

function nextDue(items, count) {
  if (!items.length) return count ? muted(`${count} delayed`) : muted("—");
  const list = el("ul", { class: "due" }, items.map((item) =>
    el("li", {}, time(item.due_at), " ", orUnknown(item.type), " ",
      el("span", { class: "id" }, item.message_id))));
  return list;
}

function endpointRow(endpoint) {
  const parked = endpoint.poison_count > 0
    ? el("a", { href: routeWith("parked", { endpoint: endpoint.name }), class: "alarm" },
      String(endpoint.poison_count))
    : "0";
  const oldest = endpoint.oldest_token_age_seconds;
  return el("tr", { "data-endpoint": endpoint.name },
    el("th", { scope: "row" }, endpoint.name),
    el("td", {}, endpoint.mode),
    el("td", { "data-figure": "store" }, endpoint.store),
    el("td", { class: "num", "data-figure": "queue_depth" }, String(endpoint.queue_depth)),
    el("td", { class: "num", "data-figure": "poison_count" }, parked),
    el("td", { class: "num", "data-figure": "tokens_in_flight" },
      String(endpoint.tokens_in_flight)),
    el("td", {
      class: oldest !== null && oldest > AGE_WARNING_SECONDS ? "num warn" : "num",
      "data-figure": "oldest_token_age",
    }, age(oldest)),
    el("td", { class: "num", "data-figure": "delayed_count" }, String(endpoint.delayed_count)),
    el("td", { "data-figure": "next_due" }, nextDue(endpoint.next_due, endpoint.delayed_count)),
    el("td", { "data-figure": "processed" }, processedChart(endpoint.processed_last_minutes)),
    el("td", { class: "num", "data-figure": "p50" }, millis(endpoint.latency_ms.p50)),
    el("td", { class: "num", "data-figure": "p95" }, millis(endpoint.latency_ms.p95)));
}

/** Tokens written by senders that are not endpoints of the app (the HTTP ingress, the CLI,
 * bulk jobs): messages sent from outside and not processed yet. The server lists them only
 * when there are any. */
function otherSenders(senders) {
  if (!senders || senders.length === 0) return null;
  return el("div", { id: "other-senders" },
    el("h3", {}, "Sent from outside the app, not processed yet"),
    table(["Sender", "In flight", "Oldest token", "Delayed"], senders.map((sender) =>
      el("tr", { "data-sender": sender.sender },
        el("th", { scope: "row" }, sender.sender),
        el("td", { class: "num" }, String(sender.tokens_in_flight)),
        el("td", { class: "num" }, age(sender.oldest_token_age_seconds)),
        el("td", { class: "num" }, String(sender.delayed_count)))), { compact: true }));
}

function recipients(lists) {
  return el("section", { id: "recipients" }, el("h2", {}, "Recipient lists"),
    table(["Topic", "Subscribed endpoints"], lists.map((list) => el("tr", {},
      el("th", { scope: "row" }, list.topic),
      el("td", {}, list.endpoints.length ? list.endpoints.join(", ") : muted("no subscriber")))),
    { empty: "No topic has a recipient list." }));
}

function audit(report) {
  const section = el("section", { id: "audit" }, el("h2", {}, "Last audit report"));
  if (report === null) {
    section.append(el("p", { class: "muted" }, "No audit report."));
    return section;
  }
  const verdict = String(report.verdict);
  const known = ["pass", "warn", "fail"].includes(verdict.toLowerCase());
  section.append(el("dl", { class: "facts" },
    el("dt", {}, "When"), el("dd", {}, time(report.at)),
    el("dt", {}, "Verdict"),
    el("dd", {}, el("span", { class: known ? `badge verdict-${verdict.toLowerCase()}` : "badge" },
      verdict))),
  el("pre", { class: "summary" }, report.summary));
  return section;
}

/** A count of a look that read only part of the records: a lower bound, said as such. */
function atLeast(count, complete) {
  return complete ? String(count) : `at least ${count}`;
}

function sessionRow(endpoint) {
  const sessions = endpoint.sessions;
  const counted = (figure, count, { warn = false } = {}) => el("td", {
    class: warn && count > 0 ? "num warn" : "num", "data-figure": figure,
  }, atLeast(count, sessions.complete));
  return el("tr", { "data-sessions": endpoint.name },
    el("th", { scope: "row" }, endpoint.name),
    counted("sessions_waiting", sessions.waiting, { warn: true }),
    el("td", { class: "num", "data-figure": "sessions_oldest_waiting" },
      age(sessions.oldest_waiting_seconds)),
    counted("sessions_open", sessions.open),
    counted("sessions_finished", sessions.finished),
    counted("sessions_unreadable", sessions.unreadable, { warn: true }),
    el("td", { class: "num", "data-figure": "sessions_scanned" },
      sessions.complete ? String(sessions.records_scanned)
        : `${sessions.records_scanned}, more not read`));
}

/** Said when committed sessions wait for their signals: their requests stopped after the
 * commit (or are signalling right now), and the cleanup sends their messages a while after.
 * Where a look stopped early, more may wait than it saw. */
function sessionsWaiting(withSessions) {
  const waiting = withSessions.filter((e) => e.sessions.waiting > 0);
  if (waiting.length === 0) return null;
  const total = waiting.reduce((sum, e) => sum + e.sessions.waiting, 0);
  const complete = withSessions.every((e) => e.sessions.complete);
  const oldest = Math.max(...waiting.map((e) => e.sessions.oldest_waiting_seconds || 0));
  const after = Math.max(...waiting.map((e) => e.sessions.resend_after_seconds));
  const one = total === 1;
  return el("p", { class: "warning", id: "sessions-waiting" },
    `${complete ? "" : "At least "}${total} ${one ? "session" : "sessions"} committed and ` +
    `not signalled yet (${waiting.map((e) => e.name).join(", ")}): ` +
    `${one ? "its request" : "their requests"} stopped after the commit, or ` +
    `${one ? "is" : "are"} signalling now. The cleanup sends ${one ? "its" : "their"} ` +
    `messages ${age(after)} after the commit (BUS_SESSION_RESEND_SECONDS); ` +
    `the oldest has waited ${age(oldest)}.`);
}

/** The endpoints that take transactional sessions, their sessions by state (none: nothing). */
function sessionsTable(withSessions) {
  if (withSessions.length === 0) return null;
  const partial = withSessions.some((e) => !e.sessions.complete);
  return el("div", { id: "sessions" },
    el("h3", {}, "Transactional sessions"),
    partial ? el("p", { class: "muted", id: "sessions-partial" },
      "A look reads at most BUS_CONSOLE_AUDIT_SCAN_ROWS records per endpoint: " +
      "where it stopped, the counts are lower bounds.") : null,
    el("div", { class: "scroll" },
      table(["Endpoint", "Waiting to be signalled", "Oldest waiting", "Open", "Finished",
        "Unreadable", "Records read"], withSessions.map(sessionRow),
      { id: "sessions-table" })));
}

/** A saga endpoint's instances and the messages that found none (docs/sagas.md). A look
 * stopped at its limit gives lower bounds, as the sessions' does. */
function sagaRow(endpoint) {
  const saga = endpoint.saga;
  const counted = (figure, count, { warn = false } = {}) => el("td", {
    class: warn && count > 0 ? "num warn" : "num", "data-figure": figure,
  }, atLeast(count, saga.complete));
  const overdue = saga.next_timeout_overdue_seconds;
  return el("tr", { "data-saga": endpoint.name },
    el("th", { scope: "row" }, endpoint.name),
    counted("saga_live", saga.live),
    counted("saga_completed", saga.completed),
    counted("saga_timeouts_pending", saga.timeouts_pending),
    el("td", {
      class: overdue !== null && overdue > AGE_WARNING_SECONDS ? "warn" : null,
      "data-figure": "saga_next_timeout_due",
      title: overdue ? `due ${age(overdue)} ago and not handled yet` : null,
    }, time(saga.next_timeout_due)),
    counted("saga_not_found", saga.not_found),
    counted("saga_unreadable", saga.unreadable, { warn: true }),
    el("td", { class: "num", "data-figure": "saga_scanned" },
      `${saga.instances_scanned} instances, ${saga.audit_rows_scanned} audit rows` +
      (saga.complete ? "" : ", more not read")));
}

/** Look an instance up by its correlation value: the saga view, at its own address. */
function sagaLookup(names, chosen = {}) {
  const select = el("select", { name: "endpoint", id: "saga-endpoint" }, names.map((name) =>
    el("option", { value: name, selected: name === chosen.endpoint }, name)));
  const form = el("form", { class: "filters", id: "saga-lookup" },
    el("label", {}, "Saga", select),
    el("label", {}, "Correlation value",
      el("input", {
        name: "instance", id: "saga-instance-value", type: "text", autocomplete: "off",
        required: true, maxlength: 1024, value: chosen.instance ?? "",
      })),
    el("button", { type: "submit" }, "Look up"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    location.hash = routeWith("saga", {
      endpoint: data.get("endpoint"), instance: data.get("instance"),
    });
  });
  return form;
}

/** The saga endpoints, their instances and their messages that found none (none: nothing). */
function sagasTable(withSagas) {
  if (withSagas.length === 0) return null;
  const partial = withSagas.some((e) => !e.saga.complete);
  return el("div", { id: "sagas" },
    el("h3", {}, "Sagas"),
    el("p", { class: "muted" },
      "saga_not_found: messages acknowledged without an instance to handle them, as long " +
      "as their audit rows are kept (CLEANUP_AUDIT_RETENTION_SECONDS)."),
    partial ? el("p", { class: "muted", id: "sagas-partial" },
      "A look reads at most BUS_CONSOLE_AUDIT_SCAN_ROWS instances and as many audit rows " +
      "per saga: where it stopped, the counts are lower bounds.") : null,
    el("div", { class: "scroll" },
      table(["Saga", "Live", "Completed", "Timeouts pending", "Next due", "saga_not_found",
        "Unreadable", "Rows read"], withSagas.map(sagaRow), { id: "sagas-table" })),
    el("h4", {}, "One instance, by its correlation value"),
    sagaLookup(withSagas.map((e) => e.name)));
}

async function overviewView(view) {
  const overview = await api("overview");
  const withSessions = overview.endpoints.filter((e) => e.sessions);
  const withSagas = overview.endpoints.filter((e) => e.saga);
  const columns = ["Endpoint", "Mode", "Store", "Queue", "Parked", "In flight", "Oldest token",
    "Delayed", "Next due", "Processed / min", "p50", "p95"];
  view.append(
    el("section", { id: "endpoints" },
      el("h2", {}, "Endpoints"),
      el("p", { class: "muted" }, "As of ", time(overview.generated_at),
        "; refreshed every 15 s. ",
        button("Refresh now", () => render(), { kind: "link" })),
      sessionsWaiting(withSessions),
      el("div", { class: "scroll" },
        table(columns, overview.endpoints.map(endpointRow),
          { empty: "No endpoint.", id: "endpoint-table" })),
      otherSenders(overview.other_senders),
      sessionsTable(withSessions),
      sagasTable(withSagas)),
    recipients(overview.recipients),
    audit(overview.audit));
}

// ---------------------------------------------------------------------------------------
// One saga instance, by its correlation value

function instanceFacts(instance) {
  if (instance === null) {
    return el("p", { id: "saga-status", "data-status": "none" },
      "No instance: never started, or completed and retired after BUS_SAGA_RETENTION_SECONDS. " +
      "A message for it is saga_not_found unless it is of a type that starts the saga.");
  }
  if (instance.unreadable !== undefined) {
    return el("div", {},
      el("p", { class: "warning", id: "saga-status", "data-status": "unreadable" },
        "The instance's row cannot be read: messages that reach it fail, and are parked once " +
        "their tries are spent."),
      el("pre", { class: "reason", id: "saga-unreadable" }, instance.unreadable));
  }
  const timeouts = instance.pending_timeouts.map((t) => el("tr", { "data-timeout": t.message_id },
    el("td", {}, t.due ? time(t.due) : muted("at once")),
    el("td", {}, t.type),
    el("td", { class: "id" }, t.message_id)));
  return el("div", {},
    el("dl", { class: "facts" },
      el("dt", {}, "Status"),
      el("dd", { id: "saga-status", "data-status": instance.status }, instance.status),
      el("dt", {}, "Completed at"), el("dd", {}, time(instance.completed_at)),
      el("dt", {}, "Started by message"),
      el("dd", { class: "id", id: "saga-started-by" }, orUnknown(instance.started_by))),
    el("h3", {}, `Pending timeouts (${timeouts.length})`),
    table(["Due", "Type", "Message id"], timeouts,
      { empty: "No timeout pending.", compact: true, id: "saga-timeouts" }));
}

async function sagaView(view, params) {
  const endpoint = params.get("endpoint") || "";
  const instance = params.get("instance") ?? "";
  const found = await api("saga", { query: { endpoint, instance } });
  view.append(el("section", { id: "saga" },
    el("p", {}, el("a", { href: "#/overview" }, "‹ Overview")),
    el("h2", {}, `${found.endpoint} / `, el("span", { class: "id", id: "saga-correlation" },
      found.correlation)),
    sagaLookup(found.sagas, { endpoint, instance }),
    instanceFacts(found.instance),
    el("p", { class: "muted" }, "bus state ", found.endpoint,
      " <correlation value> shows the instance's rows, its state included.")));
}

// ---------------------------------------------------------------------------------------
// Failed messages: groups, the filtered and paged list

function groupSelector(group) {
  return { endpoint: group.endpoint, type: group.type, error_type: group.error_type };
}

function groupRow(group) {
  const show = routeWith("parked", {
    endpoint: group.endpoint, type: group.type ?? "", error: group.error_type ?? "",
  });
  const actions = writable()
    ? [button("Replay", () => replay(groupSelector(group), group.count), { kind: "primary" }),
      button("Discard…", () => discard(groupSelector(group), group.count), { kind: "danger" })]
    : [];
  return el("tr", { class: "group" },
    el("td", {}, group.endpoint),
    el("td", {}, orUnknown(group.type)),
    el("td", {}, orUnknown(group.error_type)),
    el("td", { class: "num" }, el("a", { href: show, title: "list them" }, String(group.count))),
    el("td", { class: "reason" }, group.example_reason),
    el("td", { class: "actions" }, actions));
}

/** The list's filters. A type or error type left blank matches any; one that is empty in
 * the address (a group's link) matches the messages that have none. */
function filterForm(filters) {
  const field = (name, label, value) => el("label", {}, label,
    el("input", {
      name, value: value ?? "", type: "text", autocomplete: "off",
      placeholder: value === "" ? "(none)" : "any",
    }));
  const size = el("select", { name: "size" }, PAGE_SIZES.map((n) =>
    el("option", { value: n, selected: n === filters.size }, String(n))));
  const form = el("form", { class: "filters", id: "filters" },
    field("endpoint", "Endpoint", filters.endpoint),
    field("type", "Message type", filters.type),
    field("error", "Error type", filters.error),
    el("label", {}, "Per page", size),
    el("button", { type: "submit" }, "Filter"),
    el("a", { href: "#/parked", class: "clear" }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const given = (name) => data.get(name).trim() || null;
    location.hash = routeWith("parked", {
      endpoint: given("endpoint"), type: given("type"), error: given("error"),
      size: data.get("size"),
    });
  });
  return form;
}

function messageRow(message) {
  return el("tr", { "data-id": message.id },
    el("td", {}, message.endpoint),
    el("td", {}, el("a", { href: route("message", message.endpoint, message.id), class: "id" },
      message.message_id || message.id)),
    el("td", {}, orUnknown(message.type)),
    el("td", {}, orUnknown(message.error_type)),
    el("td", { class: "reason" }, message.reason),
    el("td", {}, time(message.parked_at)),
    el("td", { class: "num" }, message.dequeue_count === null ? "—" : String(message.dequeue_count)));
}

function pager(page, shown, view, query) {
  const first = page.total === 0 ? 0 : page.skip + 1;
  const last = page.skip + shown;
  const to = (skip) => routeWith(view, { ...query, skip });
  const previous = page.skip > 0
    ? el("a", { href: to(Math.max(0, page.skip - page.size)), class: "button", rel: "prev" },
      "‹ Previous")
    : el("span", { class: "button disabled" }, "‹ Previous");
  const next = last < page.total
    ? el("a", { href: to(page.skip + page.size), class: "button", rel: "next" }, "Next ›")
    : el("span", { class: "button disabled" }, "Next ›");
  return el("p", { class: "pager" }, previous,
    el("span", { class: "position" }, `${first}–${last} of ${page.total}`), next);
}

/** Replay or discard the whole filtered list: one endpoint, and a type or an error type (an
 * action never takes a whole queue by omission). In a selector, null means "has none". */
function filteredActions(filters, total) {
  if (!writable() || total === 0) return null;
  if (filters.endpoint === null || (filters.type === null && filters.error === null)) {
    return el("p", { class: "muted" },
      "Filter by an endpoint and a type or an error to replay or discard the whole list.");
  }
  const selector = { endpoint: filters.endpoint };
  if (filters.type !== null) selector.type = filters.type || null;
  if (filters.error !== null) selector.error_type = filters.error || null;
  return el("p", { class: "actions" },
    button(`Replay these ${total}`, () => replay(selector, total), { kind: "primary" }),
    button(`Discard these ${total}…`, () => discard(selector, total), { kind: "danger" }));
}

function failedFilters(params) {
  const size = Number(params.get("size"));
  return {
    endpoint: params.get("endpoint") || null,
    type: params.get("type"),
    error: params.get("error"),
    size: PAGE_SIZES.includes(size) ? size : DEFAULT_PAGE_SIZE,
    skip: Math.max(0, Number(params.get("skip")) || 0),
  };
}

/** The two ways into the failed messages: by group (where to start), or every one. */
function failedTabs(current) {
  const tab = (name, href, label) => el("a", {
    href, class: "tab", "aria-current": name === current ? "page" : null,
  }, label);
  return el("nav", { class: "tabs", "aria-label": "Failed messages" },
    tab("failed", "#/failed", "By group"),
    tab("parked", "#/parked", "Every parked message"));
}

/** Said when a listing pass stopped before the end of a queue (its limit, or its time): the
 * counts are of the messages it read, and more are parked. */
function incomplete(listing) {
  if (listing.complete !== false) return null;
  return el("p", { class: "incomplete", id: "incomplete" },
    "Incomplete: more messages are parked than this listing read " +
    "(BUS_CONSOLE_LIST_LIMIT, or the pass ran out of time). Counts are lower bounds.");
}

async function groupsView(view) {
  const groups = await api("failed/groups");
  const total = groups.groups.reduce((sum, group) => sum + group.count, 0);
  view.append(failedTabs("failed"), el("section", { id: "groups" },
    el("h2", {}, `Parked messages by endpoint, type and error (${total})`),
    incomplete(groups),
    table(["Endpoint", "Message type", "Error type", "Count", "Example reason", ""],
      groups.groups.map(groupRow), { empty: "Nothing is parked." })));
}

async function parkedView(view, params) {
  const filters = failedFilters(params);
  const { skip, ...kept } = filters;
  const page = await api("failed", { query: { ...kept, skip } });
  view.append(failedTabs("parked"), el("section", { id: "failed-list" },
    el("h2", {}, "Parked messages"),
    incomplete(page),
    filterForm(filters),
    filteredActions(filters, page.total),
    pager(page, page.messages.length, "parked", kept),
    el("div", { class: "scroll" }, table(
      ["Endpoint", "Message", "Type", "Error type", "Reason", "Parked at", "Tries"],
      page.messages.map(messageRow), { empty: "No parked message matches." })),
    pager(page, page.messages.length, "parked", kept)));
}

// ---------------------------------------------------------------------------------------
// One parked message

async function messageView(view, endpoint, id) {
  const message = await api(`failed/${encodeURIComponent(endpoint)}/${encodeURIComponent(id)}`);
  const one = { endpoint: message.endpoint, ids: [message.id] };
  const back = () => { location.hash = routeWith("parked", { endpoint: message.endpoint }); };
  const actions = writable()
    ? el("p", { class: "actions" },
      button("Replay", () => replay(one, 1, { confirm: false, after: back }), { kind: "primary" }),
      button("Discard…", () => discard(one, 1, { after: back }), { kind: "danger" }))
    : null;
  const headers = Object.entries(message.headers).map(([name, value]) =>
    el("tr", {}, el("th", { scope: "row" }, name), el("td", {}, value)));
  view.append(el("section", { id: "message" },
    el("p", {}, el("a", { href: routeWith("parked", { endpoint: message.endpoint }) },
      "‹ Parked messages")),
    el("h2", {}, `${message.endpoint} / `, el("span", { class: "id" }, message.id)),
    actions,
    el("dl", { class: "facts" },
      el("dt", {}, "Message id"), el("dd", { class: "id" }, orUnknown(message.message_id)),
      el("dt", {}, "Type"), el("dd", {}, orUnknown(message.type)),
      el("dt", {}, "Parked at"), el("dd", {}, time(message.parked_at)),
      el("dt", {}, "Reason"), el("dd", {}, el("pre", { class: "reason", id: "reason" },
        message.reason))),
    el("h3", {}, "Headers"),
    table(["Name", "Value"], headers, { empty: "No header.", compact: true }),
    el("h3", {}, "Body"),
    bodySize(message),
    el("pre", { class: "body", id: "body" }, message.body),
    el("h3", {}, "Delivery history"),
    el("ol", { class: "history" }, message.history.map((step) =>
      el("li", {}, time(step.at), " ", step.what)))));
}

/** The body's full size, and when the view shows only its beginning, how to get the rest. */
function bodySize(message) {
  const whole = message.body_chars;
  if (typeof whole !== "number" || whole <= message.body.length) {
    const size = whole ?? message.body.length;
    return el("p", { class: "muted", id: "body-size" }, `${size} characters`);
  }
  return el("p", { class: "muted", id: "body-size" },
    `The first ${message.body.length} of ${whole} characters. `,
    button("Download the whole body",
      () => downloadBody(message.endpoint, message.id).catch(showError)));
}

// ---------------------------------------------------------------------------------------
// The action journal

async function actionsView(view, params) {
  const skip = Math.max(0, Number(params.get("skip")) || 0);
  const size = DEFAULT_PAGE_SIZE;
  const journal = await api("actions", { query: { size, skip } });
  const rows = journal.actions.map((action) => el("tr", { "data-action": action.id },
    el("td", {}, time(action.at)),
    el("td", { class: "who" }, action.who),
    el("td", {}, action.what,
      action.done === false ? el("span", { class: "badge unfinished", title:
        "the action was recorded and did not report its end: it runs, or was interrupted" },
      "not finished") : null),
    el("td", {}, action.endpoint),
    el("td", {}, action.selector),
    el("td", { class: "num" }, String(action.count)),
    el("td", { class: "reason" }, action.reason === null ? muted("—") : action.reason),
    el("td", { class: "id" }, action.id)));
  const pages = pager({ skip, size, total: journal.total }, rows.length, "actions", {});
  view.append(el("section", { id: "journal" },
    el("h2", {}, "Action journal"),
    el("p", { class: "muted" }, "Every replay and discard: who, when, what, newest first."),
    pages,
    table(["When", "Who", "What", "Endpoint", "Selection", "Count", "Reason", "Action"], rows,
      { empty: "No action yet." })));
}

// ---------------------------------------------------------------------------------------
// Routing

function parseRoute() {
  const raw = location.hash.replace(/^#\/?/, "");
  const mark = raw.indexOf("?");
  const [path, search] = mark < 0 ? [raw, ""] : [raw.slice(0, mark), raw.slice(mark + 1)];
  const parts = path.split("/").map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  return { parts, params: new URLSearchParams(search || "") };
}

/** The view a route names (an unknown one: the overview), and the header tab it belongs to. */
function viewOf(parts, params) {
  const [name, ...rest] = parts;
  if (name === "failed") return { tab: "failed", draw: (view) => groupsView(view) };
  if (name === "parked") return { tab: "failed", draw: (view) => parkedView(view, params) };
  if (name === "message" && rest.length === 2) {
    return { tab: "failed", draw: (view) => messageView(view, rest[0], rest[1]) };
  }
  if (name === "actions") return { tab: "actions", draw: (view) => actionsView(view, params) };
  if (name === "saga") return { tab: "overview", draw: (view) => sagaView(view, params) };
  return { tab: "overview", draw: (view) => overviewView(view), refresh: true };
}

async function render() {
  clearTimeout(state.refreshTimer);
  const renderId = ++state.renderId;
  const { parts, params } = parseRoute();
  const { tab, draw, refresh } = viewOf(parts, params);
  for (const link of document.querySelectorAll("header nav a")) {
    if (link.dataset.view === tab) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const view = el("div", { class: `view view-${tab}` });
  try {
    if (state.session === null) await startSession();
    await draw(view);
  } catch (e) {
    if (renderId !== state.renderId) return;
    showError(e);
    // Nothing but the error (and the sign-in it asks for): figures left from before would
    // look current.
    document.getElementById("view").replaceChildren(...signInFor(e));
    return;
  }
  if (renderId !== state.renderId) return; // a newer render started meanwhile
  document.getElementById("view").replaceChildren(view);
  if (refresh) {
    state.refreshTimer = setTimeout(() => {
      if (document.visibilityState === "visible") render();
    }, OVERVIEW_REFRESH_MS);
  }
}

/** The secret's sign-in form when `error` asks for it (the secret typed before, if any, is
 * forgotten: it was wrong or has been changed), else nothing. */
function signInFor(error) {
  if (!(error instanceof ApiError) || !error.signIn) return [];
  credentials.secret = null;
  sessionStorage.removeItem(SECRET_KEY);
  state.session = null;
  const input = el("input", {
    type: "password", id: "console-secret", name: "secret", autocomplete: "current-password",
    required: true,
  });
  const form = el("form", { id: "sign-in", class: "sign-in" },
    el("h2", {}, "Sign in"),
    el("p", { class: "muted" },
      "This console asks for its own secret besides the function key. It is kept in this "
        + "tab until the tab is closed."),
    el("label", { for: "console-secret" }, "Console secret"),
    input,
    el("button", { type: "submit", id: "sign-in-ok" }, "Sign in"));
  form.addEventListener("submit", (event) => {
    event.preventDefault(); // never sent as a form: only as a header, by api()
    credentials.secret = input.value;
    sessionStorage.setItem(SECRET_KEY, input.value);
    clearError();
    render();
  });
  return [form];
}

async function startSession() {
  const session = await api("session");
  state.session = session;
  document.getElementById("app-name").textContent = session.app;
  if (session.system) showSystem(session.system);
  document.getElementById("who").textContent = `signed in as ${session.who}`;
  document.getElementById("read-only").hidden = !session.read_only;
  document.body.classList.toggle("is-read-only", session.read_only);
}

/** The selector of a system's apps: choosing one starts a session for it, at its overview
 * (a view of the app left would name its endpoints and messages). */
function showSystem(system) {
  state.app = system.app;
  const select = document.getElementById("app-select");
  select.replaceChildren(...system.apps.map((name) =>
    el("option", { value: name, selected: name === system.app }, name)));
  document.getElementById("app-choice").hidden = false;
  document.getElementById("app-name").textContent = `${system.app} (${state.session.app})`;
}

function chooseApp(event) {
  state.app = event.target.value;
  state.session = null;
  clearError();
  if (window.location.hash === "#/overview") render();
  else window.location.hash = "#/overview";
}

function start() {
  document.getElementById("app-select").addEventListener("change", chooseApp);
  document.getElementById("banner-close").addEventListener("click", clearError);
  document.getElementById("notice-close").addEventListener("click", () => {
    document.getElementById("notice").hidden = true;
  });
  window.addEventListener("hashchange", () => {
    clearError();
    render();
  });
  render();
}

start();
