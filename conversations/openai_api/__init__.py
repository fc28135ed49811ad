"""The OpenAI-compatible API (/openai/v1/): a transport like api/, a second door onto
the same services, selectors and runs. Programs written for OpenAI's Conversations API
work against Parley by changing `base_url` and `api_key` (a Parley API key).

- `base.py`: the view base (API-key auth, the /api/v1/ throttles, JSON in and out, body
  limit) and the request's parts;
- `errors.py`: OpenAI's error shape and status codes for every failure;
- `ids.py`: `conv_`, `msg_`, `fc_`, `fco_`, `resp_`, `file-` ids over Parley's UUIDs;
- `items_in.py` / `objects.py`: OpenAI's items to stored messages and back;
- `file_parts.py` / `files_in.py`: images and files in a user's message, to the files
  it carries (stored, or read for the model alone);
- `paging.py`: items by id and a page at a time along the active path;
- `views/`: conversations, items, responses, files, models; `urls.py`.
"""
