"""Drawing a scene: textured table, objects, and the view of the camera on the gripper (numpy + Pillow).

Per episode, :class:`Renderer` draws the static table once in table coordinates (texture and objects,
supersampled 2x and box-filtered down, on a floor that surrounds the table), and the light map. Per step it
crops the square of table the eye-in-hand camera sees (centred on the effector's x-y, ``2 * view_half_width(z)``
metres wide: the height is the zoom), resamples it to the image, draws the fingers at the centre (apart when
open, together when closed) and lights it. Everything the dynamics and the expert use is visible: where each
object is relative to the effector (its offset from the image centre), the effector's height (the zoom), the
gripper's state, and every object within reach.

``render_third_person`` is the second, fixed camera an OpenVLA-OFT policy takes beside the eye-in-hand one: the
whole table from straight above (the same table image, resampled once per episode), lit the same way, with the
effector drawn where it is (``spec.THIRD_PERSON_*``).
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from prismatic_tr.envs.scene import Scene, SceneObject, TableLook
from prismatic_tr.envs.spec import (
    IMAGE_SIZE,
    OBJECT_RADIUS,
    TABLE_HALF,
    THIRD_PERSON_RING_PER_M,
    THIRD_PERSON_RING_PX,
    VIEW_HALF_AT_TABLE,
    VIEW_HALF_PER_M,
    WORKSPACE_XY,
    WORKSPACE_Z,
    view_half_width,
)

SUPERSAMPLE = 2
SIDE_PX = 3.0            # drawn thickness of an object (its darker side face below the top face), pixels
SIDE_SHADE = 0.62        # side face brightness relative to the top face

# The table image: BG_PPM pixels per metre (the camera's scale with the effector on the table), covering every
# point the camera can see, [-BG_HALF, BG_HALF]^2 metres; the floor outside the table.
BG_PPM = (IMAGE_SIZE / 2) / VIEW_HALF_AT_TABLE
BG_HALF = WORKSPACE_XY + VIEW_HALF_AT_TABLE + VIEW_HALF_PER_M * WORKSPACE_Z[1] + 0.01
FLOOR_RGB = (58, 58, 64)

# Fingers at the image centre, in pixels: each a bar FINGER_WIDTH wide and 2 * FINGER_HALF_LENGTH long, its inner
# edge HALF_GAP from the centre; drawn with an outline so they show on every table.
FINGER_WIDTH, FINGER_HALF_LENGTH = 6.0, 20.0
OPEN_HALF_GAP, CLOSED_HALF_GAP = 16.0, 3.0
FINGER_RGB, OUTLINE_RGB = (235, 235, 240), (25, 25, 30)

# Unit outlines of the shapes (x right, y down), scaled by the object's radius in pixels and rotated.
_STAR = [(r * np.sin(a), -r * np.cos(a)) for i in range(10) for r, a in [((1.2, 0.5)[i % 2], i * np.pi / 5)]]
_CROSS_W = 0.36
_CROSS = [(-_CROSS_W, -1), (_CROSS_W, -1), (_CROSS_W, -_CROSS_W), (1, -_CROSS_W), (1, _CROSS_W), (_CROSS_W, _CROSS_W),
          (_CROSS_W, 1), (-_CROSS_W, 1), (-_CROSS_W, _CROSS_W), (-1, _CROSS_W), (-1, -_CROSS_W), (-_CROSS_W, -_CROSS_W)]
_OUTLINES: dict[str, list[tuple[float, float]]] = {
    "block": [(-0.86, -0.86), (0.86, -0.86), (0.86, 0.86), (-0.86, 0.86)],
    "triangle": [(1.15 * np.sin(a), -1.15 * np.cos(a)) for a in (0.0, 2 * np.pi / 3, 4 * np.pi / 3)],
    "star": _STAR,
    "cross": _CROSS,
}
CIRCLE_RADIUS = 0.95


def _smooth_noise(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """(size, size) float32 noise, about unit variance, smooth over size / cells pixels."""
    small = Image.fromarray(rng.standard_normal((cells, cells)).astype(np.float32))
    return np.asarray(small.resize((size, size), Image.BICUBIC), dtype=np.float32)


def table_texture(look: TableLook, size: int) -> np.ndarray:
    """(size, size, 3) uint8 table: the look's base colour times (1 + a pattern of a few per cent)."""
    rng = np.random.default_rng(look.texture_seed)
    fine, coarse = _smooth_noise(rng, size, size // 6), _smooth_noise(rng, size, 6)
    v, u = np.mgrid[0:size, 0:size].astype(np.float32)
    if look.pattern == "wood":
        angle = rng.uniform(-0.2, 0.2) + (np.pi / 2 if rng.random() < 0.5 else 0.0)
        period = rng.uniform(10, 24) * size / IMAGE_SIZE
        phase = (u * np.cos(angle) + v * np.sin(angle)) / period + 0.8 * coarse
        pattern = 0.07 * np.sin(2 * np.pi * phase) + 0.03 * fine + 0.04 * coarse
    elif look.pattern == "tiles":
        tile = rng.uniform(30, 55) * size / IMAGE_SIZE
        grout = (np.minimum(u % tile, v % tile) < 1.5 * size / IMAGE_SIZE).astype(np.float32)
        per_tile = rng.uniform(-0.04, 0.04, size=(int(size / tile) + 2,) * 2).astype(np.float32)
        pattern = per_tile[(v // tile).astype(int), (u // tile).astype(int)] - 0.18 * grout + 0.03 * fine
    else:  # speckle
        pattern = 0.06 * fine + 0.05 * coarse
    rgb = np.asarray(look.rgb, dtype=np.float32) * (1.0 + pattern)[..., None]
    return np.clip(rgb, 0, 255).astype(np.uint8)


def light_gain(look: TableLook, size: int = IMAGE_SIZE) -> np.ndarray:
    """(size, size, 3) float32 multiplicative light: brightness x linear gradient x per-channel gain."""
    v, u = np.mgrid[0:size, 0:size].astype(np.float32) / (size / 2) - 1.0
    ramp = u * np.cos(look.light_direction) + v * np.sin(look.light_direction)
    gain = look.brightness * (1.0 + look.light_strength * ramp)
    return (gain[..., None] * np.asarray(look.channel_gain, dtype=np.float32)).astype(np.float32)


def _bg_pixels(x: float, y: float, scale: float) -> tuple[float, float]:
    """(u, v) of table point (x, y) in the table image drawn ``scale`` times BG_PPM."""
    return scale * BG_PPM * (x + BG_HALF), scale * BG_PPM * (BG_HALF - y)


def object_outline(obj: SceneObject, scale: float = 1.0, dv: float = 0.0) -> list[tuple[float, float]]:
    """Polygon of a non-circle object in the table image (``scale`` times BG_PPM), shifted down by ``dv`` pixels."""
    u, v = _bg_pixels(obj.x, obj.y, scale)
    r, c, s = OBJECT_RADIUS * BG_PPM * scale, np.cos(obj.angle), np.sin(obj.angle)
    return [(u + r * (px * c - py * s), v + dv + r * (px * s + py * c)) for px, py in _OUTLINES[obj.shape]]


def draw_object(draw: ImageDraw.ImageDraw, obj: SceneObject, scale: float) -> None:
    """Side face (darker, shifted down by SIDE_PX) then top face, on the table image ``scale`` times BG_PPM."""
    side = tuple(int(c * SIDE_SHADE) for c in obj.rgb)
    for dv, rgb in ((SIDE_PX * scale, side), (0.0, obj.rgb)):
        if obj.shape == "circle":
            u, v = _bg_pixels(obj.x, obj.y, scale)
            r = CIRCLE_RADIUS * OBJECT_RADIUS * BG_PPM * scale
            draw.ellipse((u - r, v + dv - r, u + r, v + dv + r), fill=rgb)
        else:
            draw.polygon(object_outline(obj, scale, dv), fill=rgb)


def finger_boxes(is_open: bool) -> list[tuple[float, float, float, float]]:
    """The two fingers (u0, v0, u1, v1) in image pixels, around the image centre."""
    c, g = IMAGE_SIZE / 2, OPEN_HALF_GAP if is_open else CLOSED_HALF_GAP
    return [(c - g - FINGER_WIDTH, c - FINGER_HALF_LENGTH, c - g, c + FINGER_HALF_LENGTH),
            (c + g, c - FINGER_HALF_LENGTH, c + g + FINGER_WIDTH, c + FINGER_HALF_LENGTH)]


def table_image(scene: Scene) -> np.ndarray:
    """The whole table with its objects seen from straight above at BG_PPM, on the floor: (S, S, 3) uint8."""
    size = int(round(2 * BG_HALF * BG_PPM))
    big = size * SUPERSAMPLE
    canvas = Image.new("RGB", (big, big), FLOOR_RGB)
    table_px = int(round(2 * TABLE_HALF * BG_PPM * SUPERSAMPLE))
    u0, v0 = (int(round(c)) for c in _bg_pixels(-TABLE_HALF, TABLE_HALF, SUPERSAMPLE))
    canvas.paste(Image.fromarray(table_texture(scene.look, table_px)), (u0, v0))
    draw = ImageDraw.Draw(canvas)
    for obj in sorted(scene.objects, key=lambda o: -o.y):  # far objects first
        draw_object(draw, obj, SUPERSAMPLE)
    return np.asarray(canvas.reduce(SUPERSAMPLE)).copy()


class Renderer:
    """Images of one scene. ``render(effector, gripper_open)`` (the eye-in-hand camera) and
    ``render_third_person(effector, gripper_open)`` (the fixed overhead one) -> (IMAGE_SIZE, IMAGE_SIZE, 3) uint8."""

    def __init__(self, scene: Scene) -> None:
        self.table = Image.fromarray(table_image(scene))
        self.gain = light_gain(scene.look)
        self._overview: Image.Image | None = None  # the whole table at IMAGE_SIZE, made on first use

    def render_third_person(self, effector: tuple[float, float, float], gripper_open: bool) -> np.ndarray:
        """The fixed overhead camera: the whole table, the effector a ring (radius growing with its height) around
        a dot, the ring filled when the gripper is closed."""
        if self._overview is None:
            u0, v0 = _bg_pixels(-TABLE_HALF, TABLE_HALF, 1.0)
            u1, v1 = _bg_pixels(TABLE_HALF, -TABLE_HALF, 1.0)
            self._overview = self.table.resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR, box=(u0, v0, u1, v1))
        image = self._overview.copy()
        x, y, z = effector
        scale = IMAGE_SIZE / (2 * TABLE_HALF)
        u, v = (x + TABLE_HALF) * scale, (TABLE_HALF - y) * scale
        r = THIRD_PERSON_RING_PX + THIRD_PERSON_RING_PER_M * z
        draw = ImageDraw.Draw(image)
        draw.ellipse((u - r, v - r, u + r, v + r), fill=None if gripper_open else FINGER_RGB, outline=OUTLINE_RGB,
                     width=3)
        draw.ellipse((u - 2, v - 2, u + 2, v + 2), fill=OUTLINE_RGB)
        lit = np.asarray(image, dtype=np.float32) * self.gain
        return np.clip(lit, 0, 255).astype(np.uint8)

    def render(self, effector: tuple[float, float, float], gripper_open: bool) -> np.ndarray:
        """The camera image with the effector (and the camera) at ``effector`` (x, y, z metres)."""
        x, y, z = effector
        u, v = _bg_pixels(x, y, 1.0)
        half = view_half_width(z) * BG_PPM
        image = self.table.resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR, box=(u - half, v - half, u + half, v + half))
        draw = ImageDraw.Draw(image)
        for box in finger_boxes(gripper_open):
            draw.rectangle(box, fill=FINGER_RGB, outline=OUTLINE_RGB, width=2)
        lit = np.asarray(image, dtype=np.float32) * self.gain
        return np.clip(lit, 0, 255).astype(np.uint8)
