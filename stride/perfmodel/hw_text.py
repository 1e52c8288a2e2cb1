"""Free-text hardware as sources write it -> a catalog entry plus what the text changes.

"H100-SXM 96GB HBM2e 2.4TB/s @500W", "B200-HGX-180GB", "GB200-NVL72 (B200 GPU)",
"A100-SXM4 (80GB per ...)", "TPU v5p (v5p-128 slice)": the part family picks the catalog entry
(most specific name first: GB300 before B300, GB200 before B200), then every number the text
gives replaces the datasheet one: memory size, HBM bandwidth, a dense TFLOP/s figure, the
scale-up domain (NVL72, HGX/DGX = 8, a TPU slice). A power cap below the part's board power
lowers the tensor clock by (cap / board power)^(1/3): dynamic power goes as f V^2 and voltage
tracks frequency in the DVFS range, so P ~ f^3. Checked on NVIDIA's own parts: the H100 NVL (the
SXM die, 400 W) lists 835 dense bf16 TFLOP/s, and 989 x (400/700)^(1/3) = 824.
Link text gives bandwidth too: "8x HDR InfiniBand 200 Gb/s per node", "NDR 400 Gb/s per GPU",
"NVLink3 600 GB/s bidir per GPU". Every change is returned as a note.
"""

from __future__ import annotations

import dataclasses
import re

from stride.perfmodel.hardware import Catalog, Hardware

# (pattern on lower-cased text, catalog name); first match wins, most specific first
_FAMILIES: list[tuple[str, str]] = [
    (r"gb300", "gb300"), (r"\bb300\b|blackwell ultra", "b300"), (r"gb200", "gb200"), (r"\bb200\b", "b200"),
    (r"\bgh200\b|grace[ -]?hopper", "gh200"), (r"\bh200\b", "h200"),
    (r"\bh[18]00\b.*\bpcie\b|\bh[18]00-pcie", "h100-pcie"),
    (r"\bh100[ -]?nvl\b(?!\d)", "h100-nvl"), (r"\bh[18]00\b", "h100-sxm"),
    (r"\bb100\b", "b100"),
    (r"\ba[18]00\b", "a100-80gb"), (r"\bv100\b", "v100"), (r"\bl40s\b", "l40s"), (r"\bl40\b", "l40"),
    (r"\bl20\b", "l20"),
    (r"\bh20\b", "h20"), (r"\ba30\b", "a30"), (r"\ba40\b", "a40"), (r"\ba10g\b", "a10g"), (r"\ba10\b", "a10"),
    (r"\bl4\b", "l4"), (r"\bt4\b", "t4"),
    # "A6000 Ada" / "RTX A6000 Ada" are common names of the RTX 6000 Ada: before the Ampere RTX A6000's rule
    (r"\b(?:rtx[ -]?)?a?6000[ -]?ada\b", "rtx-6000-ada"), (r"\b(?:rtx[ -]?)?a6000\b", "rtx-a6000"),
    # the Blackwell workstation / server card: "RTX PRO 6000", "RTX 6000 Blackwell" (not the Turing Quadro RTX 6000)
    (r"\brtx[ -]?pro[ -]?6000\b|\brtx[ -]?6000[ -]?blackwell\b", "rtx-pro-6000-blackwell"),
    # the Ampere RTX A5000 / A4000, not the RTX 5000 / 4000 Ada ("A5000 Ada" is refused by name below)
    (r"\b(?:rtx[ -]?)?a5000\b(?![ -]?ada)", "rtx-a5000"), (r"\b(?:rtx[ -]?)?a4000\b(?![ -]?ada)", "rtx-a4000"),
    (r"\b(?:rtx[ -]?)?3090[ -]?ti\b", "rtx-3090-ti"),
    (r"\b(?:rtx[ -]?)?3090\b", "rtx-3090"),
    (r"\b(?:rtx[ -]?)?4090\b", "rtx-4090"), (r"\b(?:rtx[ -]?)?5090\b(?![ -]?(?:ti|d)\b)", "rtx-5090"),
    (r"\bmi250x\b", "mi250x"), (r"\bmi250\b", "mi250"), (r"\bmi210\b", "mi210"), (r"\bmi100\b", "mi100"),
    (r"\bmi355x\b", "mi355x"), (r"\bmi350x\b", "mi350x"), (r"\bmi325x\b", "mi325x"), (r"\bmi300x\b", "mi300x"),
    (r"gaudi[ -]?3|hl-325", "gaudi3"), (r"gaudi[ -]?2|hl-225", "gaudi2"),
    # Trainium (Trn1): one device = one NeuronCore-v2 (see _neuron_device); Trainium2/3 are refused by name below
    (r"trainium(?![ -]?v?[23]\b)|\btrn1n?\b|neuron ?core-?v2", "trainium"),
    (r"ironwood|\btpu[ -]?v?7x?\b|\btpu7x\b", "tpu7x"),  # before v6e: "TPU v6e ... (Ironwood)" is a TPU7x
    (r"\bv6e\b|trillium", "tpu-v6e"), (r"\bv5p\b", "tpu-v5p"),
    (r"\bv5e\b|v5 ?lite", "tpu-v5e"), (r"tpu[ -]?v4\b|\bv4-\d+\b", "tpu-v4"), (r"tpu[ -]?v3\b|\bv3-\d+\b", "tpu-v3"),
    (r"tpu[ -]?v2\b|\bv2-\d+\b", "tpu-v2"),
]
# a datacenter generation named without its part ("NVIDIA Ampere GPUs (part not named in the paper)"): the one
# training part of that generation at cluster scale, noted as assumed (after every named part: first match wins)
_GENERATION_ONLY: list[tuple[str, str, str]] = [
    # not Ampere Altra (an Arm CPU), Jetson / Orin (embedded), GeForce or workstation Ampere cards
    (r"^(?!.*\b(altra|jetson|orin|geforce|rtx|quadro|laptop)\b).*\bampere\b", "a100-80gb",
     "Ampere part not named: A100 SXM4 80GB assumed (an A800 computes the same, NVLink 400 GB/s)"),
    (r"^(?!.*\b(grace|jetson|geforce)\b).*\bhopper\b", "h100-sxm", "Hopper part not named: H100 SXM5 80GB assumed"),
]
# parts users name that the catalog does not hold: refused with this name in the reason
_KNOWN_MISSING = (r"trainium[ -]?v?[23]\b|\btrn[23]\b", r"gaudi[ -]?1\b", r"\b(?:rtx[ -]?)?a?[45]000[ -]?ada\b",
                  r"\brtx[ -]?(?:50\d0(?:[ -]?(?:ti|d)\b)?|[a-z]?\d{4}\b)", r"\brtx\b", r"\bp100\b", r"\ba[2-6]000\b",
                  r"\bcs-?[23]\b", r"\bipu\b")
# parts whose catalog device is half of what a text's memory may describe (frameworks count GCDs, Neuron NeuronCores):
# (name, the whole, the device) for the note where the text gives the whole's memory
_HALF_A_PACKAGE = {"mi250x": ("MI250X", "package's two GCDs", "GCD"), "mi250": ("MI250", "package's two GCDs", "GCD"),
                   "trainium": ("Trainium", "chip's", "NeuronCore-v2")}
# the same part with less memory, picked where the text gives a size at most the smaller one's
_SMALLER_MEMORY = {"a100-80gb": "a100-40gb", "a100-pcie-80gb": "a100-pcie-40gb"}
# card forms a part also comes in, with other clocks, power, memory and no NVSwitch ("A100 PCIe", "H200 NVL"):
# read as the catalog's entry of that form, or refused by name (an SXM entry would be the wrong part)
_FORMS = {"pcie": r"\bpci-?e\b|-pcie", "nvl": r"\bnvl\b(?!\d)|-nvl\b(?!\d)"}
# what a part's own text may look like when it is described from a catalog part (the refusals quote it)
DESCRIBE_EXAMPLE = "e.g. 'H100 SXM 96GB 3.35TB/s @ 500 W' or 'H100 SXM 835 TFLOPS 94GB'"
# words of a link, not of the memory, in a clause that gives a GB/s figure
_LINK_CLAUSE = (r"nvlink|nvswitch|pci-?e|infiniband|\bib\b|roce|ethernet|\bgbe\b|xgmi|infinity fabric|\bici\b|"
                r"\blinks?\b|interconnect|network|\bnics?\b|bidir|per direction|each way|scale-?(?:up|out)|fabric|"
                r"connectx|\bdcn\b|\befa\b")
# `v2-N` / `v3-N` / `v4-N` / `v5p-N` slices count TensorCores, 2 per chip
_TPU_CORES = {"tpu-v2": 2, "tpu-v3": 2, "tpu-v4": 2, "tpu-v5p": 2}

# Cloud instances and VM families users name instead of the part: (pattern, the part as text, scale-out GB/s
# per GPU). Recalled from the providers' instance pages (AWS EC2 P4/P5/P6 accelerated-computing table, GCP
# accelerator-optimized machine families, Azure ND-series); p6-b200 also in stas00/ml-engineering
# network/README.md:1400 (8 x 50 GB/s EFA v4 per node).
_INSTANCES: list[tuple[str, str, float]] = [
    (r"p4d\.24xlarge|\bp4d\b", "A100 40GB SXM", 400 / 8 / 8),
    (r"p4de\.24xlarge|\bp4de\b", "A100 80GB SXM", 400 / 8 / 8),
    (r"p5en\.48xlarge|\bp5en\b", "H200 SXM", 3200 / 8 / 8),
    (r"p5e\.48xlarge|\bp5e\b", "H200 SXM", 3200 / 8 / 8),
    (r"p5\.48xlarge|\bp5\b(?!e)", "H100 SXM 80GB", 3200 / 8 / 8),
    (r"p6-b200", "B200 HGX", 3200 / 8 / 8),
    (r"a2-highgpu|\ba2 high\b", "A100 40GB SXM", 100 / 8 / 8),
    (r"a2-ultragpu|\ba2 ultra\b", "A100 80GB SXM", 100 / 8 / 8),
    (r"a3-megagpu|\ba3 mega\b", "H100 SXM 80GB", 8 * 200 / 8 / 8),
    (r"a3-ultragpu|\ba3 ultra\b", "H200 SXM", 8 * 400 / 8 / 8),
    (r"a3-highgpu|\ba3 high\b|\ba3\b(?! ?(mega|ultra))", "H100 SXM 80GB", 4 * 200 / 8 / 8),
    (r"a4-highgpu|\ba4\b(?!0)", "B200 HGX", 8 * 400 / 8 / 8),
    (r"nd ?96 ?amsr|nd ?a100 ?v4.*80|ndm ?a100", "A100 80GB SXM", 200 / 8),
    (r"nd ?96 ?asr|nd ?a100 ?v4", "A100 40GB SXM", 200 / 8),
    (r"nd ?96 ?isr ?h200|nd ?h200 ?v5", "H200 SXM", 400 / 8),
    (r"nd ?96 ?isr ?h100|nd ?h100 ?v5", "H100 SXM 80GB", 400 / 8),
    (r"nd ?mi300x", "MI300X", 400 / 8),
]


def _normalise(low: str) -> str:
    """Drop trademark marks ("Intel(R) Gaudi(R) 2", "®", "™"), counts written onto the part ("8x H100", "2x8 A100",
    "1x"), plurals ("H100s") and unicode."""
    low = re.sub(r"\((?:r|tm)\)|[®™]", "", low)
    low = re.sub(r"(?<![a-z0-9.])\d+\s*[x×]\s*(?:\d+\s*(?:x|×)?\s*)?(?=[a-z])", " ", low)
    return re.sub(r"\b(?!l40s\b)([a-z]{1,2}\d{2,3}[a-z]?)s\b", r"\1", low)  # the L40S is a part, not L40s


def _num(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def _forms(hw: Hardware) -> str:
    """The names a catalog entry goes by, lower-cased and joined (an NVL card is a PCIe card too)."""
    words = " ".join((hw.name, hw.display_name, *hw.aliases)).lower()
    return words + (" pcie" if re.search(_FORMS["nvl"], words) else "")


def _form_factor(hw: Hardware, said: str, raw: str, low: str, catalog: Catalog) -> Hardware:
    """The entry of the card form the text names ("A100 PCIe", "H200 NVL") where the family rule picked another
    form of the part; the catalog's entry of that form if it holds one, else a ValueError naming the part."""
    for form, pattern in _FORMS.items():
        if not re.search(pattern, low) or re.search(pattern, _forms(hw)):
            continue
        part = hw.name.split("-")[0]
        match = next((d for d in catalog.devices.values()
                      if part in re.split(r"[^a-z0-9]+", _forms(d)) and re.search(pattern, _forms(d))), None)
        if match is None:
            named = f"{said.upper()} {'PCIe' if form == 'pcie' else 'NVL'}"
            raise ValueError(f"gpu {raw!r}: `{named}` is not in the catalog (its entry `{hw.name}` is the "
                             f"{hw.display_name}: another card, with other clocks, power and memory; known: "
                             f"{', '.join(catalog.names())}); add it with --hardware-file or describe it from a "
                             f"catalog part ({DESCRIBE_EXAMPLE})")
        hw = match
    return hw


def resolve(text: str | None, catalog: Catalog) -> tuple[Hardware, list[str]]:
    """The catalog device `text` names, modified by what the text says; ValueError naming the part."""
    raw = (text or "").strip()
    low = raw.lower().replace("_", " ")
    if not low or low in ("n/a", "-", "not stated", "unknown"):
        raise ValueError("gpu is blank: the device is needed (its peak and memory set the answer)")
    notes: list[str] = []
    instance = next(((part, out) for pat, part, out in _INSTANCES if re.search(pat, low.replace("_", " "))), None)
    if instance:
        notes.append(f"{raw!r}: {instance[0]}, {instance[1]:g} GB/s scale-out per GPU (the provider's instance type)")
        low = f"{instance[0].lower()} {low}"
    low = _normalise(low)
    try:
        hw = catalog.get(raw)
    except Exception:  # noqa: BLE001 - fall through to the family rules
        name, said = next(((n, m.group(0)) for pat, n in _FAMILIES if (m := re.search(pat, low))), (None, ""))
        generic = next(((n, why) for pat, n, why in _GENERATION_ONLY if re.search(pat, low)), None)
        if name is None and generic and not any(re.search(p, low) for p in _KNOWN_MISSING):
            name, said = generic[0], ""
            notes.append(generic[1])
        if name is None or name not in catalog.devices:
            miss = next((m.group(0) for p in _KNOWN_MISSING if (m := re.search(p, low))), None)
            what = f"`{miss.upper()}` is not in the catalog" if miss else "is not a part the catalog knows"
            raise ValueError(f"gpu {raw!r}: {what} (known: {', '.join(catalog.names())}); add it with "
                             f"--hardware-file or describe it from a catalog part ({DESCRIBE_EXAMPLE})") from None
        hw = _form_factor(catalog.devices[name], re.split(r"[ -]", said)[0], raw, low, catalog)
    if hw.name == "trainium":
        hw = _neuron_device(hw, raw, low, notes)
    hw = _modify(hw, raw, low, catalog, notes)
    if instance:
        hw = dataclasses.replace(hw, scaleout_bw_gbps=instance[1])
    return hw, notes


def _neuron_device(hw: Hardware, raw: str, low: str, notes: list[str]) -> Hardware:
    """A Trainium text as the catalog's device, one NeuronCore-v2 (half a chip), as the Neuron SDK and its published
    tables count TP/PP/DP. A text that counts chips and names no NeuronCore is refused (the per-chip count would
    halve the devices and double each one's share of the work); trn1n.32xlarge alone sets its links."""
    # AWS's pages call a chip a chip, a "Trainium device" or a "Trainium accelerator" (16 a trn1.32xlarge)
    if re.search(r"\b(?:chips?|devices?|accelerators?)\b|\b16 per (?:instance|node)\b", low) \
            and not re.search(r"neuron ?cores?|\bcores?\b|\bnc\b", low):
        raise ValueError(f"gpu {raw!r}: the catalog's Trainium device is one NeuronCore-v2, half a Trainium chip, as "
                         "Neuron counts TP/PP/DP; count NeuronCores (2 a chip, 32 a trn1.32xlarge) and say so, e.g. "
                         "'Trainium NeuronCore-v2'")
    notes.append("Trainium: one device = one NeuronCore-v2 (half a chip: 95 of its 190 bf16 TFLOP/s, 16 of its 32 GiB)")
    trn1n, trn1 = re.search(r"\btrn1n\b", low), re.search(r"\btrn1\b(?!n)", low)
    if trn1n and not trn1:
        notes.append("trn1n.32xlarge: NeuronLink-v2 768 GB/s a chip (192 each way a NeuronCore), EFA 1600 Gb/s "
                     "(6.25 GB/s a NeuronCore)")
        return dataclasses.replace(hw, scaleup_bw_gbps=2 * hw.scaleup_bw_gbps, scaleout_bw_gbps=2 * hw.scaleout_bw_gbps)
    if trn1n and trn1:
        notes.append("trn1.32xlarge and trn1n.32xlarge both named: the trn1.32xlarge's links assumed (NeuronLink-v2 "
                     "384 GB/s a chip, EFA 800 Gb/s)")
    return hw


def _no_non_numbers(text: str, what: str) -> None:
    """A NaN or infinite figure where a number with its unit belongs ("@ nan W", "inf GB", "nan Gb/s") is an error:
    the number readers skip it, so the catalog's figure was used and nothing said so (audit 22, F7)."""
    m = re.search(r"(?<![\w.])([+-]?(?:nan|inf(?:inity)?))\s*(?:w(?:atts?)?|gi?b|tb|gbps|gb/s|gb|tflops?)\b",
                  (text or "").lower())
    if m:
        raise ValueError(f"{what} {text.strip()!r}: {m.group(1)!r} is not a number; write the figure, or leave it out "
                         "to take the catalog's")


def _no_negatives(text: str, what: str) -> None:
    """A figure written with a minus sign ("H100 SXM -80GB") is an error: the number readers took its digits, so a
    plan ran at 80 GB without a word while "0GB" was refused (first-contact audit of 2026-12-06). A hyphen inside a
    name ("H100-SXM5-80GB") is no sign. A power cap's sign is the power reader's to refuse."""
    m = re.search(r"(?:^|[\s(,;:=])(-\s*\d+(?:\.\d+)?)\s*(?:gi?b|tb|gbps|gb/s|gb|tflops?)\b",  # a power cap: below
                  (text or "").lower())
    if m:
        raise ValueError(f"{what} {text.strip()!r}: {m.group(1)!r} is negative; write the figure without a sign, or "
                         "leave it out to take the catalog's")


def _modify(hw: Hardware, raw: str, low: str, catalog: Catalog, notes: list[str]) -> Hardware:
    _no_non_numbers(raw, "gpu")
    _no_negatives(raw, "gpu")
    changes: dict[str, object] = {}
    # memory as vendors write it ("80GB") or as tools report it ("184.3 GiB"): the catalog's memory_gib holds
    # the vendor's GB figure, so both are read as that number
    mem = _num(r"(?<![\w.])(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*gi?b\b(?!/| ?/s|ps)", low)
    if mem is not None and not 1 <= mem <= 10000:
        raise ValueError(f"gpu {raw!r}: memory {mem:g} GB is not a device's memory (1-10000 GB per device); write "
                         "the per-device size, e.g. '80GB'")
    small = catalog.devices.get(_SMALLER_MEMORY.get(hw.name, ""))
    if small is not None and mem is not None and mem <= small.memory_gib:
        hw = small
    elif hw.name in _SMALLER_MEMORY and mem is None:
        notes.append(f"A100 memory size not stated: {hw.memory_gib:g}GB assumed")
    half = _HALF_A_PACKAGE.get(hw.name)
    if half and mem is not None and abs(mem - 2 * hw.memory_gib) <= 0.5:
        notes.append(f"{half[0]} {mem:g} GB is the {half[1]}: one {half[2]} ({hw.memory_gib:g} GB) a device")
        mem = None
    if hw.name == "h100-sxm" and not re.search(r"sxm|hgx|dgx|nvl|pcie", low):
        notes.append("H100 form factor not stated: SXM assumed")
    for cut in ("h800", "a800"):  # the China-market H100 and A100: NVLink cut to 400 GB/s bidir (their datasheets)
        if re.search(rf"\b{cut}\b", low) and hw.scaleup_bw_gbps > 200.0:  # a PCIe card's link stays PCIe
            changes["scaleup_bw_gbps"] = 200.0
            notes.append(f"{cut.upper()}: NVLink 400 GB/s bidir")
    if mem is not None and abs(mem - hw.memory_gib) > 0.5:
        changes["memory_gib"] = mem
        changes["usable_memory_gib"] = None  # the catalog's figure was of its own size: the default share applies
        notes.append(f"memory {mem:g} GB from the text (catalog {hw.memory_gib:g})")
    bw = _memory_bw(raw, low)
    if bw is not None and abs(bw - hw.memory_bw_tbps) > 0.01:
        changes["memory_bw_tbps"] = bw
        notes.append(f"memory bandwidth {bw:g} TB/s from the text")
    elif "memory_gib" in changes and re.search(r"hbm", low):
        notes.append("memory bandwidth of this variant not given: the catalog's is used")
    tflops = _num(r"(?<![\w.])(\d+(?:\.\d+)?)\s*tflop", low)
    peaks = dict(hw.peak_tflops)
    dense = hw.peak_tflops.get("bf16")
    if tflops is not None and tflops <= 0:
        raise ValueError(f"gpu {raw!r}: {tflops:g} TFLOP/s is not a peak; write the dense bf16 figure")
    if tflops is not None and dense and abs(tflops / (2 * dense) - 1) <= 0.03:
        raise ValueError(f"gpu {raw!r}: {tflops:g} TFLOP/s is twice the {hw.display_name}'s dense bf16 peak "
                         f"({dense:g}): most likely the sparse (2:4) or fp8 figure, which would double the answer; "
                         "write the dense bf16 figure")
    if tflops is not None:
        scale = tflops / peaks.get("bf16", tflops)
        peaks = {k: v * scale for k, v in peaks.items()}
        notes.append(f"dense bf16 peak {tflops:g} TFLOP/s from the text")
    # a cap as written ("@ 500 W", "500W power limit"), any size and sign: the checks below refuse what no cap is
    signed, watt = low.replace("\u2212", "-"), r"(-?\d+(?:\.\d+)?)\s*w(?:atts?)?\b"
    watts = _num(r"@\s*" + watt, signed)
    watts = _num(r"(?<![\w.])" + watt, signed) if watts is None else watts
    if watts is None and hw.name == "rtx-pro-6000-blackwell" and re.search(r"max[ -]?q", low):
        watts = 300.0  # the Max-Q Workstation Edition: the same chip at 300 W (NVIDIA's RTX PRO 6000 Blackwell family)
        notes.append("RTX PRO 6000 Blackwell Max-Q: 300 W")
    if watts is None and tflops is None and re.search(r"power[ -]?(limit|cap|capped)", low):
        raise ValueError(f"gpu {raw!r}: a power limit without its value (the clock it sets can move the answer by "
                         "more than 10%; write it, e.g. '@ 700 W')")
    if watts is not None and watts <= 0:
        raise ValueError(f"gpu {raw!r}: power cap {watts:g} W is not a power; write the cap in watts, e.g. '@ 500 W'")
    if watts is not None and hw.tdp_w and watts < 0.2 * hw.tdp_w:
        raise ValueError(f"gpu {raw!r}: power cap {watts:g} W is under 20% of the {hw.display_name}'s board power "
                         f"({hw.tdp_w:g} W): not a cap a training run holds; write the cap in watts per device")
    if watts is not None and tflops is not None:
        notes.append(f"power cap {watts:g} W not applied on top of the stated {tflops:g} TFLOP/s (taken as the "
                     "peak at that cap)")
    elif watts is not None and not hw.tdp_w:
        notes.append(f"power cap {watts:g} W not applied: the catalog has no board power for {hw.display_name}")
    elif watts is not None and watts > hw.tdp_w * 1.005:
        notes.append(f"power cap {watts:g} W is above the {hw.display_name}'s board power ({hw.tdp_w:g} W): it "
                     "changes nothing")
    elif watts is not None and watts < hw.tdp_w * 0.98:
        clock = (watts / hw.tdp_w) ** (1 / 3)
        peaks = {k: v * clock for k, v in peaks.items()}
        notes.append(f"power cap {watts:g} W of {hw.tdp_w:g} W: tensor peaks x {clock:.3f} (clock ~ P^(1/3))")
    if peaks != hw.peak_tflops:
        changes["peak_tflops"] = peaks
        # the best achievable GEMM moves with the clock (a cap) or the part's stated peak alike
        changes["mamf_tflops"] = {k: v * peaks[k] / hw.peak_tflops[k] for k, v in hw.mamf_tflops.items()
                                  if k in peaks and hw.peak_tflops.get(k)}
    nvl = _num(r"nvl(\d{2,3})\b", low)
    if nvl and nvl >= 8:
        domain = int(nvl) if not re.search(r"(?<!g)b300|hgx", low) else 8  # HGX B300 "NVL16" counts dies
        if domain != hw.scaleup_domain:
            changes["scaleup_domain"] = domain
            notes.append(f"NVLink domain {domain} from the text")
    elif re.search(r"\bhgx\b|\bdgx\b", low) and hw.scaleup_domain != 8 and hw.vendor == "nvidia" \
            and not re.search(r"dgx-?2", low):
        changes["scaleup_domain"] = 8
        notes.append("HGX/DGX node: NVLink domain 8")
    if re.search(r"dgx-?2", low):
        changes["scaleup_domain"] = 16
        notes.append("DGX-2: 16 GPUs on NVSwitch")
    m = re.search(r"\b(?:v2|v3|v4|v5p|v5e|v6e|v5litepod)-(\d+)\b", low)
    if m and hw.name.startswith("tpu"):
        chips = int(m.group(1)) // _TPU_CORES.get(hw.name, 1)
        if chips >= 1 and chips != hw.scaleup_domain:
            changes["scaleup_domain"] = chips
            notes.append(f"TPU slice of {chips} chips (ICI); slices joined by DCN")
    if changes:
        hw = dataclasses.replace(hw, **changes, display_name=f"{hw.display_name} [{raw}]")  # type: ignore[arg-type]
    return hw


def _memory_bw(raw: str, low: str) -> float | None:
    """HBM bandwidth in TB/s that a part's text states: "3.35TB/s", or "3350 GB/s" in a clause that does not
    name a link (NVLink, PCIe, a NIC: those figures are the links'); a figure no memory gives is refused."""
    tb = _num(r"(?<![\w.])(\d+(?:\.\d+)?)\s*tb/?s", low)
    if tb is not None:
        if not 0.2 <= tb <= 30:
            raise ValueError(f"gpu {raw!r}: memory bandwidth {tb:g} TB/s is not a device's (0.2-30 TB/s); write "
                             "the HBM bandwidth per device, e.g. '3.35TB/s'")
        return tb
    for clause in re.split(r"[,;()+]", raw):
        m = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)\s*(?:[Gg]B|GiB)\s*(?:/\s*s(?:ec)?\b|ps\b)", clause)
        if not m or re.search(_LINK_CLAUSE, clause.lower()):
            continue
        gb = float(m.group(1))
        if not 200 <= gb <= 30000:
            raise ValueError(f"gpu {raw!r}: memory bandwidth {gb:g} GB/s is not a device's (200-30000 GB/s); write "
                             "the HBM bandwidth per device (e.g. '3350 GB/s'), or name the link it belongs to")
        return gb / 1000
    return None


_RATE = r"(\d+(?:\.\d+)?)\s*([GT])(b|B)(?:it)?\s*(?:/\s*[sS](?:ec|EC)?|ps)\b"
# a port speed as NICs and switches are sold: "25GbE", "2x 100GbE", "RoCE 100G", "400G InfiniBand" (always bits;
# read where the text names a network or says per what, so a bare "80G" is not taken for a link); not one speed
# of a list a NIC supports ("10Gb/25Gb/.../200Gb"), nor a PHY name ("10GBASE-T")
_PORT = r"(?<![\w./])(\d+(?:\.\d+)?)\s*([GT])(?:b|bit)?(?:e\b|(?![\w/]))"
_NETWORK = (r"infiniband|\bib\b|roce|ethernet|\befa\b|gbe\b|\b[nhxe]dr\b|connectx|\bnics?\b|\bopa\b|omni-?path|"
            r"slingshot|rdma")
# a host bus's figures beside a network in a description of the node ("ROCE2; GPU-PCIe: 504 GB/s")
_HOST_BUS = r"pci-?e"
# networks named by their generation, Gb/s a port: InfiniBand EDR 100, HDR 200 (HDR100: 100), NDR 400 (NDR200:
# 200), XDR 800 (the InfiniBand Trade Association's roadmap); Intel Omni-Path 100
_GENERATION_RATE = r"(?:\b|(?<=\d[xX]))([ehnx]dr)(100|200|400|800)?\b|\bomni-?path\b|\bopa\b"
_GENERATION_GBITS = {"edr": 100, "hdr": 200, "ndr": 400, "xdr": 800}
_MAX_NIC_GBYTES = 100.0  # the fastest NIC a GPU has (ConnectX-8, 800 Gb/s)


def _generation_gbits(m: re.Match[str]) -> int:
    if not m.group(1):
        return 100  # Omni-Path
    return int(m.group(2)) if m.group(2) else _GENERATION_GBITS[m.group(1).lower()]


def _rate(text: str) -> tuple[float, re.Match[str]] | None:
    """The first rate a link text states, in GB/s, with its match (group 1 the number as written)."""
    m = re.search(_RATE, text)
    if m:
        value = float(m.group(1)) * (1000 if m.group(2) == "T" else 1)
        return (value / 8 if m.group(3) == "b" else value), m
    m = re.search(_PORT, text, re.I) if re.search(_NETWORK + r"|per (?:node|gpu|vm|host|server|device)",
                                                  text, re.I) else None
    if m:
        return float(m.group(1)) * (1000 if m.group(2).upper() == "T" else 1) / 8, m
    return None


def link_gbytes_per_device(text: str | None, per_node: int, scale_up: bool = False) -> float | None:
    """GB/s per device per direction that a link text states, or None. "Gb" (lower-case b, or
    "Gbps") is bits, "GB" bytes; bidirectional figures are halved, and so are NVLink / NVSwitch / xGMI /
    Infinity Fabric figures with no direction (the vendors quote those as bidirectional totals: NVLink 4's
    "900 GB/s" is 450 each way); per-node (VM, host) and "aggregate" figures are divided over the node's
    devices, and so are NIC counts ("8x ConnectX-7 IB NDR 400Gb/s": a node's NICs) unless the text says per
    GPU. A system description listing several networks ("Storage: 2x ..., Compute: 8x ..., Management: ...")
    is read at its compute network."""
    raw = re.sub(r"\((?:[^()]*?)(?:assumed|not stated)(?:[^()]*?)\)", "", text or "")
    _no_non_numbers(raw, "link")
    if re.search(r"(?<![\w.])0+\s*[x×*]\s*(?=\d|[a-z])", raw, re.I):  # "0x 400G InfiniBand" was read as one NIC
        raise ValueError(f"link {raw.strip()!r}: a count of 0 links or NICs is no link; write the count, e.g. '8x'")
    if not scale_up and not _rate(raw):  # a network named by its generation only: "4x HDR200 InfiniBand per node"
        named = list(re.finditer(_GENERATION_RATE, raw, re.I))
        if named:
            m = named[-1]  # the last: "Omni-Path (OPA), 4 OmniPath links per node" counts the links at the end
            raw = f"{raw[:m.end()]} {_generation_gbits(m)} Gb/s{raw[m.end():]}"
    if not scale_up:  # the compute network of a multi-network description: named so, else the most NICs
        split = re.split(r"[;,]|\+\s(?=\d)", raw)
        stated = [p for p in split if _rate(p)]
        parts = [p for p in stated if len(split) == 1 or not re.search(_HOST_BUS, p, re.I)]
        if stated and not parts:
            return None
        compute = [p for p in parts if re.search(r"\bcompute\b", p, re.I)]
        other = [p for p in parts if not re.search(r"storage|management|mgmt|front[- ]?end", p, re.I)]
        pick = compute or other or parts
        if len(pick) > 1:
            pick = sorted(pick, key=lambda p: -int((re.search(r"(\d+)\s*x\b", p) or re.search("()", "")).group(1) or 1))
        # one network of several; a single rate keeps the clauses that qualify it ("..., one HCA per node")
        if len(stated) > 1:
            raw = pick[0] if pick else raw
    low = raw.lower()
    if not low.strip() or re.match(r"\s*(not stated|none|n/a)", low):
        return None
    rate = _rate(raw)
    if not rate:
        return None
    value, m = rate
    # the clause the rate is in ("..., 2 x X710 10GBASE-T": a count in another clause is another network's)
    lo = max(raw.rfind(",", 0, m.start()), raw.rfind(";", 0, m.start())) + 1
    clause = raw[lo:m.start()] + m.group(1)  # up to the rate's number (every rate pattern starts with it)
    # (an EC2 instance size, "p5.48xlarge", is no count: review of round 29, M2)
    mult = re.search(r"(?<![\w.])(\d+)\s*[x*×](?!large)\s*(?:[A-Za-z0-9-]+\s+|\(){0,5}?" + re.escape(m.group(1)) + "$",
                     clause)
    # a count written without "x" before the adapters it counts: "8 NVIDIA Mellanox 400 Gbps HDR InfiniBand HCAs"
    not_adapters = r"(?!nodes?\b|servers?\b|hosts?\b|gpus?\b|with\b)"
    adapters = r"hcas?|nics?|adapters?|rails?|ports?" + ("" if scale_up else r"|links?")
    mult = mult or re.search(r"(?<![\d.])(\d{1,2})\s+(?:" + not_adapters + r"[A-Za-z][\w-]*\s+){0,5}?"
                             + re.escape(m.group(1)) + r"(?![\d.])[^;,]*?\b(?:" + adapters + r")\b",
                             raw[lo:], re.I)
    after = raw[m.end():]
    if not mult and not scale_up:  # ... or after it: "NDR 400 Gb/s InfiniBand, 8 HCAs per node", "HDR, 8 per node"
        mult = re.search(r"(?<![\d.])(\d{1,2})\s*(?:x\s*)?(?:[A-Za-z][\w-]*\s+){0,3}?(?:" + adapters + r")\b|"
                         r"(?<![\d.])(\d{1,2})\s+per\s+(?:node|server|host|vm)\b", after, re.I)
    count = int(next(g for g in mult.groups() if g)) if mult else 1
    nics = 1 < count <= 64
    # which the figure is, a GPU's or the node's: the first qualifier after it, else any ("3.2 Tbps per node (400
    # Gbps per GPU)" is the node's; "200 Gb/s HDR per GPU (8 per VM)" a GPU's)
    # "per H100", "per MI300X", "per NeuronCore" name a device too (a letter before the digits: "per 16 GPUs" does not)
    qualifier = (r"(per (?:gpu|device|accelerator|card|chip|neuron ?core|[a-z]{1,3}\d{2,4}[a-z]*)\b|"
                 r"/\s*(?:gpu|device|accelerator)\b)|"
                 r"(per (?:node|vm|host|server|instance)\b|aggregate|node-to-node|\.\d*xlarge\b)")
    # group 1 a GPU's, 2 the node's (an EC2 instance size after the rate, "800 Gbps (trn1.32xlarge)", is the node's:
    # AWS quotes EFA per instance)
    first = re.search(qualifier, after.lower()) or re.search(qualifier, low)
    per_device = bool(first and first.group(1))
    if per_device:
        nics = False  # a GPU's own rate: a count beside it is the node's NICs, one a GPU
    elif nics:
        value *= count
    if "bidir" in low or (scale_up and re.search(r"nvlink|nvswitch|xgmi|infinity fabric|neuronlink", low)
                          and not re.search(r"per direction|unidir|each way", low)):
        value /= 2
    if scale_up and "neuronlink" in low and not re.search(r"per neuron ?core", low):
        value /= 2  # AWS quotes NeuronLink a Trainium chip's; a device here is one of its two NeuronCores
    # AWS quotes EFA bandwidth per instance (p4d 400 Gb/s, p5 3,200, trn1 800: the EC2 instance-type pages), so a
    # bare EFA rate is the node's
    efa = not scale_up and re.search(r"\befa\b|elastic fabric adapter", low)
    node = bool(first and first.group(2)) or (nics and not scale_up) or bool(efa and not per_device)
    # no NIC moves more than 800 Gb/s (100 GB/s) for one GPU: a larger figure not said to be a GPU's is the node's
    # ("3.2 Tbps RoCE", "1.6 Tbps RDMA node-to-node": 8 x 400 and 8 x 200 Gb/s)
    if not per_device and (node or (not scale_up and value > _MAX_NIC_GBYTES)):
        value /= max(1, per_node)
    return value if value > 0 else None
