// The page's side panels: the draft beside the chat (shown or hidden) and, on narrow
// screens, the conversation list that slides in over the chat.

const $ = (id) => document.getElementById(id);

export function setSidebar(open) {
  document.body.classList.toggle("sidebar-open", open);
  $("sidebar-toggle").setAttribute("aria-expanded", String(open));
  $("backdrop").hidden = !open;
}

export function setUpPanels() {
  $("draft-toggle").addEventListener("click", (event) => {
    const hidden = document.body.classList.toggle("draft-hidden");
    event.currentTarget.setAttribute("aria-expanded", String(!hidden));
  });
  $("sidebar-toggle").addEventListener("click", () => setSidebar(!document.body.classList.contains("sidebar-open")));
  $("backdrop").addEventListener("click", () => setSidebar(false));
  if (matchMedia("(max-width: 900px)").matches) {
    document.body.classList.add("draft-hidden");
    $("draft-toggle").setAttribute("aria-expanded", "false");
  }
}
