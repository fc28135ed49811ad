// The conversation websocket with automatic reconnect. While a run is being followed, the
// reconnect URL carries `?run_id=&after=` so the server sends exactly the missed events.

const MAX_DELAY_MS = 10000;

export class ConversationSocket {
  constructor(conversationId, { onFrame, onStatus }) {
    this.conversationId = conversationId;
    this.onFrame = onFrame;
    this.onStatus = onStatus;
    this.attempt = 0;
    this.resume = null; // {runId, after}
    this.ws = null;
    this.timer = null;
    this.stopped = false;
    this.connectedOnce = false;
    // Resolves at the first `conversation.connected`: from then on no run event is missed.
    this.ready = new Promise((resolve) => {
      this.markReady = resolve;
    });
    window.addEventListener("online", () => this.reconnectNow());
  }

  url() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    let url = `${scheme}://${location.host}/ws/conversations/${this.conversationId}/`;
    if (this.resume) {
      const { runId, after } = this.resume;
      url += `?run_id=${encodeURIComponent(runId)}&after=${after}`;
    }
    return url;
  }

  connect() {
    this.stopped = false;
    clearTimeout(this.timer);
    this.onStatus(this.connectedOnce ? "reconnecting" : "connecting");
    const ws = new WebSocket(this.url());
    this.ws = ws;
    ws.addEventListener("message", (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      if (frame.type === "conversation.connected") {
        const reconnected = this.connectedOnce;
        this.attempt = 0;
        this.connectedOnce = true;
        this.onStatus("online");
        this.markReady();
        frame.reconnected = reconnected;
      }
      this.onFrame(frame);
    });
    ws.addEventListener("close", (event) => {
      if (this.ws !== ws || this.stopped) return;
      this.ws = null;
      if (event.code === 4404) {
        this.onStatus("gone");
        this.onFrame({ type: "socket.gone" });
        return;
      }
      if (event.code === 4401) {
        this.onStatus("signed-out");
        return;
      }
      this.scheduleReconnect();
    });
  }

  scheduleReconnect() {
    // Exponential backoff with jitter, so a restarted server is not hit by every tab at once.
    const base = Math.min(MAX_DELAY_MS, 500 * 2 ** this.attempt);
    const delay = Math.round(base * (0.75 + Math.random() * 0.5));
    this.attempt += 1;
    this.onStatus("offline", delay);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  // Drop this connection and resume on a new one (the server lost the run's stream).
  restart() {
    if (this.stopped || !this.ws) return;
    this.ws.close(4000);
  }

  reconnectNow() {
    if (this.stopped || (this.ws && this.ws.readyState <= WebSocket.OPEN)) return;
    this.connect();
  }

  send(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(frame));
      return true;
    }
    return false;
  }

  close() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close(1000);
    this.ws = null;
  }
}
