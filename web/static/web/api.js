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
// sent as JSON; a Blob (a chosen file) is sent as it is, as `contentType` (JSON unless
// told).
export async function api(path, { method = "GET", body, contentType = "application/json" } = {}) {
  const url = /^(https?:)?\//.test(path) ? path : `/api/v1/${path}`;
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = contentType;
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
  if (!response.ok) throw refusal(response.status, data);
  return data;
}

// Every item of a list answer, page after page: for the short lists (folders, tags).
export async function apiAll(path) {
  const items = [];
  for (let next = path; next; ) {
    const page = await api(next);
    items.push(...page.results);
    next = page.next;
  }
  return items;
}

// The API's error body (`{"error": {code, message, details}}`) as an ApiError.
function refusal(status, data) {
  const error = (data && data.error) || {};
  return new ApiError(
    status,
    error.code || `http_${status}`,
    error.message || `The server answered ${status}.`,
    error.details || null,
  );
}

// A file sent as the multipart field `file`. XMLHttpRequest, not fetch: only it reports
// how much of the body has gone. `onProgress(fraction)` as it goes; `done` resolves to
// the answer or rejects with an ApiError (code "aborted" after `abort()`).
export function apiUpload(path, file, { onProgress = () => {} } = {}) {
  const request = new XMLHttpRequest();
  const done = new Promise((resolve, reject) => {
    request.open("POST", `/api/v1/${path}`);
    request.setRequestHeader("Accept", "application/json");
    request.setRequestHeader("X-CSRFToken", csrfToken());
    request.responseType = "json";
    request.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    });
    request.addEventListener("load", () => {
      if (request.status >= 200 && request.status < 300) resolve(request.response);
      else reject(refusal(request.status, request.response));
    });
    request.addEventListener("error", () => {
      reject(new ApiError(0, "network", "The server cannot be reached. Check your connection."));
    });
    request.addEventListener("abort", () => reject(new ApiError(0, "aborted", "The upload was cancelled.")));
    const form = new FormData();
    form.append("file", file, file.name);
    request.send(form);
  });
  return { done, abort: () => request.abort() };
}
