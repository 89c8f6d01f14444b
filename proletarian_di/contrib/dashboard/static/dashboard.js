// Keeps the page current: every data-refresh seconds, fetch this URL again and swap its <main>
// in, unless the user is typing in a field or has selected jobs. Without JavaScript the page is still complete.
(function () {
  "use strict";
  const seconds = Number(document.body.dataset.refresh);
  if (!seconds) return;
  // Typing in a field, or jobs selected for an action: a new page would lose them.
  const typing = () => {
    const field = document.activeElement;
    const busy = field !== null && field.matches("input, select, textarea");
    return busy || document.querySelector("input[type=checkbox]:checked") !== null;
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

// A bulk action's progress page: the next step starts by itself (without JavaScript, by its button).
(function () {
  "use strict";
  const next = document.querySelector("button[data-continue]");
  if (next) setTimeout(() => next.click(), 100);
})();
