// A run's events as the page shows them: the reply streaming in, its tool cards, the
// draft changing, and how the run ended. The socket may replay events (after a reconnect
// or a reload), so each is handled once, by its per-run sequence number.

export const TERMINAL = new Set(["run.completed", "run.failed", "run.cancelled", "run.incomplete"]);

// `state` is the page's (cursors, ended, activeRun, socket); `setActiveRun` locks or frees
// the composer.
export function runEventHandler({ state, transcript, draft, setActiveRun }) {
  function runEnded(event) {
    const run = event.run || {};
    state.ended.add(event.run_id);
    if (event.type === "run.failed") {
      const reason = run.error ? run.error.message : "The reply failed.";
      transcript.streamAbandon("Not saved: the reply failed.");
      transcript.note(`The reply failed: ${reason}`, "error");
    } else if (event.type === "run.cancelled") {
      transcript.note("Stopped.", "info");
    } else if (event.type === "run.incomplete") {
      // The run says why it stopped early: the reply's token limit or too many tool rounds.
      const reason = run.error ? run.error.message : "Parley stopped after too many tool calls in one reply.";
      transcript.note(reason, "incomplete");
    }
    if (state.activeRun && state.activeRun.id === event.run_id) setActiveRun(null);
  }

  return function handleRunEvent(event) {
    const seen = state.cursors.get(event.run_id);
    if (seen !== undefined && event.sequence_number <= seen) return; // already handled
    state.cursors.set(event.run_id, event.sequence_number);
    state.socket.resume = TERMINAL.has(event.type)
      ? null
      : { runId: event.run_id, after: event.sequence_number };
    switch (event.type) {
      case "run.created":
      case "run.in_progress":
        setActiveRun(event.run);
        break;
      case "message.created":
        transcript.streamStart(event.message_id);
        transcript.scrollToBottom();
        break;
      case "message.delta":
        transcript.streamDelta(event.message_id, event.delta);
        break;
      case "reasoning.delta":
        transcript.reasoningDelta(event.message_id, event.delta);
        break;
      case "tool_call.created":
        transcript.toolCard(event.message_id, event.call_id, event.name);
        break;
      case "tool_call.arguments.delta":
        transcript.toolArguments(event.call_id, event.delta);
        break;
      case "tool_call.completed":
        transcript.toolArguments(event.call_id, event.arguments, { complete: true });
        break;
      case "tool_result.completed":
        transcript.toolResult(event.call_id, null, event.output, event.is_error, { files: event.attachments });
        break;
      case "message.completed":
        transcript.addStored(event.message);
        break;
      case "draft.updated":
        draft.changed(event.draft, "assistant");
        transcript.note("Parley updated the draft.", "draft");
        break;
      default:
        if (TERMINAL.has(event.type)) runEnded(event);
    }
  };
}
