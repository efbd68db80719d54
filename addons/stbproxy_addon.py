"""stbproxy as a script for an existing mitmproxy:

    mitmdump -s addons/stbproxy_addon.py --set stb_mode=replay --set stb_store=.stbproxy/store
    mitmweb  -s addons/stbproxy_addon.py

Options are the stb_* ones (`mitmdump -s addons/stbproxy_addon.py --options` lists them).
"""

from stbproxy.mitm import ScriptAddon

addons = [ScriptAddon()]
