// Moving between conversations without reloading the page. A conversation's address is
// the one the server serves (/chat/<id>/, /chat/ for a new chat), so a reload or a shared
// link opens the same thing; the browser's back and forward buttons move between them.
// A click with a modifier key (new tab, new window) is left to the browser.

const CONVERSATION_PATH = /^\/chat\/([0-9a-f-]{36})\/$/i;

export function conversationIdOf(pathname) {
  const match = CONVERSATION_PATH.exec(pathname);
  return match ? match[1] : null;
}

export function conversationUrl(conversationId) {
  return conversationId ? `/chat/${conversationId}/` : "/chat/";
}

function plainClick(event) {
  return event.button === 0 && !event.metaKey && !event.ctrlKey && !event.shiftKey && !event.altKey;
}

export class Navigation {
  // `load(conversationId or null)` shows that conversation (null: a new chat).
  constructor({ load }) {
    this.load = load;
    this.shown = location.pathname;
    window.addEventListener("popstate", () => {
      // Back over an in-page link (the skip link's #composer-input) keeps the conversation.
      if (location.pathname === this.shown) return;
      this.shown = location.pathname;
      this.load(conversationIdOf(location.pathname));
    });
    document.getElementById("conversation-list").addEventListener("click", (event) => {
      const link = event.target.closest("a.conversation-link");
      if (!link || !plainClick(event)) return;
      event.preventDefault();
      this.go(conversationIdOf(new URL(link.href).pathname));
    });
    document.getElementById("new-chat").addEventListener("click", (event) => {
      if (!plainClick(event)) return;
      event.preventDefault();
      this.go(null);
    });
  }

  // Open a conversation as a new history entry (nothing new when it is already open).
  go(conversationId) {
    const url = conversationUrl(conversationId);
    if (location.pathname === url) return;
    history.pushState({ conversationId }, "", url);
    this.shown = url;
    this.load(conversationId);
  }

  // The open conversation got its address (a new chat's first message): no new entry.
  replace(conversationId) {
    this.shown = conversationUrl(conversationId);
    history.replaceState({ conversationId }, "", this.shown);
  }
}
