// The colour theme: the system's (the default), light or dark, chosen with the switch on
// every page and kept in this browser. Loaded in <head> without defer, so the choice is on
// <html> before the first paint (no flash of the other theme); the switches are wired
// once the page is read. A classic script, not a module: modules always run late.
(() => {
  const KEY = "parley.theme";
  const CHOICES = ["system", "light", "dark"];

  function stored() {
    try {
      const value = localStorage.getItem(KEY);
      return CHOICES.includes(value) ? value : "system";
    } catch {
      return "system"; // storage refused (a locked-down browser): follow the system
    }
  }

  // "system" leaves the attribute off, so the style sheet follows prefers-color-scheme.
  function apply(choice) {
    if (choice === "system") document.documentElement.removeAttribute("data-theme");
    else document.documentElement.dataset.theme = choice;
  }

  function choose(choice) {
    try {
      if (choice === "system") localStorage.removeItem(KEY);
      else localStorage.setItem(KEY, choice);
    } catch {
      // Not kept, but still applied to this page.
    }
    apply(choice);
    for (const select of document.querySelectorAll("select[data-theme-switch]")) select.value = choice;
  }

  apply(stored());

  document.addEventListener("DOMContentLoaded", () => {
    for (const select of document.querySelectorAll("select[data-theme-switch]")) {
      select.value = stored();
      select.addEventListener("change", () => choose(select.value));
    }
  });

  // Another tab changed it: this one follows.
  window.addEventListener("storage", (event) => {
    if (event.key === KEY || event.key === null) choose(stored());
  });
})();
