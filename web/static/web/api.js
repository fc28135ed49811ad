// The REST API as the page uses it: session cookie + CSRF header, JSON errors as ApiError.

export class ApiError extends Error {
  // `details` as the API sent them, e.g. {problems: [{path: "$.temperature", message}]}.
  constructor(status, code, message, details = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

// A refusal because a reply is still being generated in the conversation.
export function isRunActive(error) {
  return error.code === "run_active";
}

function csrfToken() {
  const cookie = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
  return cookie ? decodeURIComponent(cookie.slice("csrftoken=".length)) : "";
}

// `path` is relative to /api/v1/, or a whole `next` link from a list answer. `body` is
// sent as JSON; a Blob (a chosen file) is sent as it is, as JSON.
export async function api(path, { method = "GET", body } = {}) {
  const url = /^(https?:)?\//.test(path) ? path : `/api/v1/${path}`;
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined || body instanceof Blob ? body : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, "network", "The server cannot be reached. Check your connection.");
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(
      response.status,
      error.code || `http_${response.status}`,
      error.message || `The server answered ${response.status}.`,
      error.details || null,
    );
  }
  return data;
}
