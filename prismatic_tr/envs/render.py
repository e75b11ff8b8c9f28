"""Drawing a scene: textured table, objects, the effector's shadow and the gripper (numpy + Pillow).

Per episode, :class:`Renderer` draws the static part once (table texture and objects, supersampled 2x and
box-filtered down, then lit) and the light map; per step it darkens the shadow under the effector, draws the
gripper (open: fingers wide apart; closed: fingers together) and lights it. Everything the dynamics and the
expert use is visible: the effector's x-y (gripper and shadow), its height (gap between gripper and
shadow, gripper size), the gripper's state, and every object.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from prismatic_tr.envs.scene import Scene, SceneObject, TableLook
from prismatic_tr.envs.spec import IMAGE_SIZE, OBJECT_RADIUS, PX_PER_M, SCALE_PER_M, to_pixels

SUPERSAMPLE = 2
SIDE_PX = 3.0            # drawn thickness of an object (its darker side face below the top face), pixels
SIDE_SHADE = 0.62        # side face brightness relative to the top face

# Gripper geometry in pixels at height 0 (scaled by 1 + SCALE_PER_M * z).
FINGER_WIDTH, FINGER_HALF_LENGTH = 5.0, 9.0
OPEN_HALF_GAP, CLOSED_HALF_GAP = 14.0, 3.0
PALM_HEIGHT, WRIST_HALF_WIDTH, WRIST_HEIGHT = 4.0, 4.0, 7.0
FINGER_RGB, PALM_RGB, WRIST_RGB, OUTLINE_RGB = (70, 70, 78), (110, 110, 120), (150, 150, 160), (235, 235, 240)

# Shadow under the effector: an ellipse on the table (radius x SHADOW_FLATTEN high), darkening by SHADOW_ALPHA
# at z = 0; it grows by SHADOW_GROWTH_PER_M and fades linearly to nothing at SHADOW_FADE_Z as the effector rises.
SHADOW_RADIUS_PX, SHADOW_FLATTEN, SHADOW_ALPHA = 11.0, 0.7, 0.4
SHADOW_GROWTH_PER_M, SHADOW_FADE_Z = 2.0, 0.3

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


def object_outline(obj: SceneObject, scale: float = 1.0, dv: float = 0.0) -> list[tuple[float, float]]:
    """Polygon (image pixels times ``scale``) of a non-circle object, shifted down by ``dv`` pixels."""
    u, v = to_pixels(obj.x, obj.y)
    r, c, s = OBJECT_RADIUS * PX_PER_M * scale, np.cos(obj.angle), np.sin(obj.angle)
    return [(scale * u + r * (px * c - py * s), scale * v + dv + r * (px * s + py * c)) for px, py in _OUTLINES[obj.shape]]


def draw_object(draw: ImageDraw.ImageDraw, obj: SceneObject, scale: float) -> None:
    """Side face (darker, shifted down by SIDE_PX) then top face, on an image ``scale`` times IMAGE_SIZE."""
    side = tuple(int(c * SIDE_SHADE) for c in obj.rgb)
    for dv, rgb in ((SIDE_PX * scale, side), (0.0, obj.rgb)):
        if obj.shape == "circle":
            u, v = to_pixels(obj.x, obj.y)
            r = CIRCLE_RADIUS * OBJECT_RADIUS * PX_PER_M * scale
            draw.ellipse((scale * u - r, scale * v + dv - r, scale * u + r, scale * v + dv + r), fill=rgb)
        else:
            draw.polygon(object_outline(obj, scale, dv), fill=rgb)


def gripper_parts(x: float, y: float, z: float, is_open: bool) -> list[tuple[tuple[float, float, float, float], tuple]]:
    """The gripper's rectangles (u0, v0, u1, v1) in pixels with their fill colours, drawn in this order."""
    uc, vc = to_pixels(x, y, z)
    s = 1.0 + SCALE_PER_M * z
    fw, fl = FINGER_WIDTH * s, FINGER_HALF_LENGTH * s
    g = (OPEN_HALF_GAP if is_open else CLOSED_HALF_GAP) * s
    top = vc - fl - PALM_HEIGHT * s
    return [
        ((uc - WRIST_HALF_WIDTH * s, top - WRIST_HEIGHT * s, uc + WRIST_HALF_WIDTH * s, top), WRIST_RGB),
        ((uc - g - fw, top, uc + g + fw, vc - fl), PALM_RGB),
        ((uc - g - fw, vc - fl, uc - g, vc + fl), FINGER_RGB),
        ((uc + g, vc - fl, uc + g + fw, vc + fl), FINGER_RGB),
    ]


def gripper_box(x: float, y: float, z: float, is_open: bool) -> tuple[float, float, float, float]:
    """Bounding box (u0, v0, u1, v1) of the drawn gripper, outline included."""
    boxes = np.array([box for box, _ in gripper_parts(x, y, z, is_open)])
    return float(boxes[:, 0].min() - 1), float(boxes[:, 1].min() - 1), float(boxes[:, 2].max() + 1), float(boxes[:, 3].max() + 1)


def darken_shadow(frame: np.ndarray, x: float, y: float, z: float) -> None:
    """Darken ``frame`` (H, W, 3) uint8 in place with the effector's soft shadow on the table below it."""
    u0, v0 = to_pixels(x, y)
    rx = SHADOW_RADIUS_PX * (1.0 + SHADOW_GROWTH_PER_M * z)
    ry, alpha = SHADOW_FLATTEN * rx, SHADOW_ALPHA * (1.0 - z / SHADOW_FADE_Z)
    size = frame.shape[0]
    i0, i1 = max(int(v0 - ry) - 1, 0), min(int(v0 + ry) + 2, size)
    j0, j1 = max(int(u0 - rx) - 1, 0), min(int(u0 + rx) + 2, size)
    if i0 >= i1 or j0 >= j1:
        return
    v, u = np.mgrid[i0:i1, j0:j1].astype(np.float32)
    d2 = ((u + 0.5 - u0) / rx) ** 2 + ((v + 0.5 - v0) / ry) ** 2
    keep = 1.0 - alpha * np.clip((1.0 - d2) * 3.0, 0.0, 1.0)
    frame[i0:i1, j0:j1] = (frame[i0:i1, j0:j1] * keep[..., None]).astype(np.uint8)


class Renderer:
    """Images of one scene. ``render(effector, gripper_open)`` -> (IMAGE_SIZE, IMAGE_SIZE, 3) uint8."""

    def __init__(self, scene: Scene) -> None:
        big = IMAGE_SIZE * SUPERSAMPLE
        canvas = Image.fromarray(table_texture(scene.look, big))
        draw = ImageDraw.Draw(canvas)
        for obj in sorted(scene.objects, key=lambda o: -o.y):  # far objects first
            draw_object(draw, obj, SUPERSAMPLE)
        self.background = np.asarray(canvas.reduce(SUPERSAMPLE)).copy()
        self.gain = light_gain(scene.look)

    def render(self, effector: tuple[float, float, float], gripper_open: bool) -> np.ndarray:
        """The camera image with the effector at ``effector`` (x, y, z metres)."""
        x, y, z = effector
        frame = self.background.copy()
        darken_shadow(frame, x, y, z)
        image = Image.fromarray(frame)
        draw = ImageDraw.Draw(image)
        for box, rgb in gripper_parts(x, y, z, gripper_open):
            draw.rectangle(box, fill=rgb, outline=OUTLINE_RGB)
        lit = np.asarray(image, dtype=np.float32) * self.gain
        return np.clip(lit, 0, 255).astype(np.uint8)
