// Placeholder page: shows the session and the overview as text. Every value is set with
// textContent, never as HTML.
"use strict";

(function () {
  const url = new URL(window.location.href);
  const given = url.searchParams.get("token");
  if (given) {
    sessionStorage.setItem("console-token", given);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  const headers = {};
  const token = sessionStorage.getItem("console-token");
  if (token) headers.Authorization = "Bearer " + token;
  const code = url.searchParams.get("code");
  if (code) headers["x-functions-key"] = code;

  async function get(path) {
    const answer = await fetch(path, { headers: headers });
    return answer.json();
  }

  get("api/session").then(function (session) {
    document.getElementById("who").textContent = session.who + " (" + session.app + ")";
  });
  get("api/overview").then(function (overview) {
    document.getElementById("overview").textContent = JSON.stringify(overview, null, 2);
  });
})();
