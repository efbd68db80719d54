"""Two small stand-in APIs on loopback, in the shape of OpenWeather and The Cat API, for
eval exec's tests (issue 44). Each checks its key as the real one does, keeps the
requests it saw, and The Cat API's favourites keep state: a favourite deleted once is
gone, so deleting it again fails, as it does live.
"""

from __future__ import annotations

import json
import threading
from urllib.parse import parse_qsl, urlsplit

from tests.loopback import LoopbackServer, QuietHandler

CITIES = {
    "london": {"name": "London", "coord": {"lon": -0.13, "lat": 51.51}, "kelvin": 281.5, "wind": 4.1},
    "paris": {"name": "Paris", "coord": {"lon": 2.35, "lat": 48.85}, "kelvin": 285.0, "wind": 3.0},
    "new york": {"name": "New York", "coord": {"lon": -74.01, "lat": 40.71}, "kelvin": 279.0, "wind": 5.5},
}
PLACES = {"london": [("London", "GB"), ("London", "CA"), ("London", "US")]}
DESCRIPTIONS = {"en": "light rain", "fr": "pluie légère"}


class _Handler(QuietHandler):
    def do_GET(self) -> None:
        self.owner.handle(self, "GET")

    def do_POST(self) -> None:
        self.owner.handle(self, "POST")

    def do_DELETE(self) -> None:
        self.owner.handle(self, "DELETE")

    def send_json(self, status: int, document) -> None:
        self.answer(status, json.dumps(document).encode())


class StandIn(LoopbackServer):
    handler = _Handler

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.seen: list[tuple[str, str, dict[str, str], dict[str, str]]] = []  # method, path, query, headers
        self.lock = threading.Lock()

    @property
    def host(self) -> str:
        return self.base_url.split("://", 1)[1]

    def handle(self, handler: _Handler, method: str) -> None:
        parts = urlsplit(handler.path)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self.lock:
            self.seen.append((method, parts.path, query, {k.lower(): v for k, v in handler.headers.items()}))
            self.route(handler, method, parts.path, query, body)


class OpenWeather(StandIn):
    """/data/2.5/weather and /forecast (q, units, lang, mode), /data/2.5/air_pollution and
    /geo/1.0/direct (which refuse lang, units and mode, so that adding them shows)."""

    def route(self, h: _Handler, method: str, path: str, query: dict[str, str], _body: bytes) -> None:
        if query.get("appid") != self.key:
            return h.send_json(401, {"cod": 401, "message": "Invalid API key. Please see the docs."})
        if path in ("/data/2.5/air_pollution", "/geo/1.0/direct"):
            extra = sorted({"lang", "units", "mode"} & set(query))
            if extra:
                return h.send_json(400, {"cod": "400", "message": f"unexpected parameter {extra[0]}"})
        if path == "/data/2.5/air_pollution":
            return h.send_json(200, {"coord": {"lon": float(query.get("lon", 0)), "lat": float(query.get("lat", 0))},
                                     "list": [{"main": {"aqi": 2}, "components": {"no2": 14.2}, "dt": 1700000000}]})
        if path == "/geo/1.0/direct":
            places = PLACES.get(query.get("q", "").lower(), [])[:int(query.get("limit", 5))]
            return h.send_json(200, [{"name": name, "country": country} for name, country in places])
        city = CITIES.get(query.get("q", "").lower())
        if query.get("mode", "json") != "json":
            return h.answer(200, b"<current><city/></current>", "application/xml")
        if city is None:
            return h.send_json(404, {"cod": "404", "message": "city not found"})
        kelvin, wind = city["kelvin"], city["wind"]
        units = query.get("units", "standard")
        temp = {"metric": round(kelvin - 273.15, 2), "imperial": round((kelvin - 273.15) * 9 / 5 + 32, 2)}.get(
            units, kelvin)
        speed = round(wind * 2.237, 2) if units == "imperial" else wind
        weather = [{"main": "Rain", "description": DESCRIPTIONS.get(query.get("lang", "en"), "light rain")}]
        if path == "/data/2.5/weather":
            return h.send_json(200, {"coord": city["coord"], "weather": weather, "main": {"temp": temp},
                                     "wind": {"speed": speed}, "name": city["name"], "cod": 200})
        if path == "/data/2.5/forecast":
            count = int(query.get("cnt", 3))
            return h.send_json(200, {"cod": "200", "message": 0, "cnt": count,
                                     "list": [{"dt": 1700000000 + 10800 * i, "main": {"temp": temp}}
                                              for i in range(count)],
                                     "city": {"name": city["name"], "coord": city["coord"]}})
        h.send_json(404, {"cod": "404", "message": "Internal error"})


class TheCatApi(StandIn):
    """/v1/images/search (no key), /v1/favourites (add, list, delete: stateful) and
    /v1/votes, the last two with the key in x-api-key."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.favourites = {100: "img-a", 101: "img-b"}
        self.next_id = 1000

    def route(self, h: _Handler, method: str, path: str, query: dict[str, str], body: bytes) -> None:
        if path == "/v1/images/search":
            breed = query.get("breed_ids", "any")
            return h.send_json(200, [{"id": f"{breed}-{i}", "url": f"https://cdn.example/{breed}-{i}.jpg",
                                      "width": 800, "height": 600} for i in range(int(query.get("limit", 1)))])
        if h.headers.get("x-api-key") != self.key:
            return h.send_json(401, {"message": "AUTHENTICATION_ERROR", "status": 401})
        if path == "/v1/favourites" and method == "GET":
            return h.send_json(200, [{"id": k, "image_id": v} for k, v in sorted(self.favourites.items())])
        if path == "/v1/favourites" and method == "POST":
            image = json.loads(body or b"{}").get("image_id")
            self.next_id += 1
            self.favourites[self.next_id] = image
            return h.send_json(200, {"message": "SUCCESS", "id": self.next_id})
        if path.startswith("/v1/favourites/") and method == "DELETE":
            number = int(path.rsplit("/", 1)[1])
            if self.favourites.pop(number, None) is None:
                return h.send_json(400, {"message": "NO_SUCH_FAVOURITE", "status": 400})
            return h.send_json(200, {"message": "SUCCESS"})
        if path == "/v1/votes" and method == "POST":
            vote = json.loads(body or b"{}")
            if not isinstance(vote.get("value"), int):
                return h.send_json(400, {"message": '"value" must be a number', "status": 400})
            self.next_id += 1
            return h.send_json(200, {"message": "SUCCESS", "id": self.next_id, "image_id": vote.get("image_id"),
                                     "value": vote["value"], "country_code": "US"})
        h.send_json(404, {"message": "NOT_FOUND", "status": 404})
