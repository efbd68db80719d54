"""The mitmproxy front end (this package is the only importer of mitmproxy).

- addon.py: ``StbAddon`` turns a flow's request into a models.Request, asks the engine, and
  puts the answer on the flow; ``ScriptAddon`` is what ``mitmdump -s
  addons/stbproxy_addon.py`` loads.
- embedded.py: ``serve`` runs the same addon in a lean embedded master with only the addons
  a proxy needs (what ``stbproxy serve`` uses), ready only once it can serve.
- fast_lane.py, plain_http.py, tunnel_lane.py: the fast lanes every connection starts in.
- streaming.py, relay.py: answers whose body is still arriving (a server's event stream),
  written as they arrive by the lanes, or through a loopback relay that mitmproxy streams.
- flows.py: flows and models, both ways, and mitmproxy flow files; ca.py: the user's CA.
- internals/: every use of mitmproxy's private names, listed at the top of its __init__.py.
- worker_pool.py: ``serve --workers N``, N processes each running this front end on one
  port (the link between them is workers/).

It may import every stbproxy module below the adapters; nothing imports it but the entry
points (cli, the mitmdump script, tests).
"""

from stbproxy.mitm.addon import ScriptAddon, StbAddon, settings_from_options
from stbproxy.mitm.ca import ca_cert_path, ensure_ca
from stbproxy.mitm.embedded import ServeHooks, serve, usable_internals
from stbproxy.mitm.flows import read_flow_file, request_from_flow, response_to_mitm

__all__ = ["ScriptAddon", "ServeHooks", "StbAddon", "ca_cert_path", "ensure_ca", "read_flow_file",
           "request_from_flow", "response_to_mitm", "serve", "settings_from_options", "usable_internals"]
