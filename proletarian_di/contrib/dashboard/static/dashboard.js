// Keeps the page current: every data-refresh seconds, fetch this URL again and swap its <main>
// in, unless the user is typing in a field. Without JavaScript the page is still complete.
(function () {
  "use strict";
  const seconds = Number(document.body.dataset.refresh);
  if (!seconds) return;
  const typing = () => {
    const field = document.activeElement;
    return field !== null && field.matches("input, select, textarea");
  };
  async function refresh() {
    if (document.hidden || typing()) return;
    try {
      const response = await fetch(location.href, {headers: {"X-Dashboard-Refresh": "1"}});
      if (!response.ok || typing()) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.querySelector("main");
      const main = document.querySelector("main");
      if (fresh && main) main.replaceWith(document.adoptNode(fresh));
    } catch (error) {
      // The server is away for a moment: try again next time.
    }
  }
  setInterval(refresh, seconds * 1000);
})();
