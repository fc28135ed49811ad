// The shared links page: Revoke, after a confirmation, through the API; the row then says
// so in place.
import { revokeShare } from "./shares.js";

const status = document.getElementById("shares-status");

document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-revoke-share]");
  if (!button) return;
  const row = button.closest("tr");
  button.disabled = true;
  try {
    if (await revokeShare(button.dataset.revokeShare)) {
      row.querySelector(".share-status").textContent = "revoked";
      button.remove();
      status.textContent = "Revoked: the link answers “not found” from now on.";
    }
  } catch (error) {
    status.textContent = `Not revoked: ${error.message}`;
  } finally {
    button.disabled = false;
  }
});
