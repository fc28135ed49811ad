// A refusal shown where the user acted: a short red line under the message (or the place
// of a missing reply), read out by screen readers, and cleared by the next attempt.

export function showProblem(holder, text) {
  if (!holder) return;
  const problem = document.createElement("p");
  problem.className = "action-error small";
  problem.setAttribute("role", "alert");
  problem.textContent = text;
  holder.append(problem);
}

export function clearProblem(holder) {
  if (!holder) return;
  for (const old of holder.querySelectorAll(":scope > .action-error")) old.remove();
}
