-- Wireshark dissector for btl, the byte transfer layer: wire protocol 1.4
-- as the book's protocol chapter (book/src/protocol.md) specifies it.
--
-- It reads:
--   - captures written by btl-std's `capture` module (link type
--     LINKTYPE_WIRESHARK_UPPER_PDU, dissector name "btl"): one frame per
--     record, with its direction;
--   - frames in UDP datagrams or TCP streams of a network capture, once
--     the port is decoded as BTL (UDP) or BTL_TCP (TCP, which cuts the
--     stream into frames);
--   - records of link type USER0, one frame each.
--
-- Every field has a filter name: btl.<field> for the header, trailers and
-- payload, btl.<type>.<field> for a body (btl.put.xfer_id,
-- btl.close.reason). One self-contained file, for Lua 5.2 (Wireshark 4.0)
-- and later.

local btl = Proto("btl", "btl byte transfer layer")
local btl_tcp = Proto("btl_tcp", "btl over a TCP stream")

local HEADER_LEN = 32
local CHECKSUM_LEN = 4
local SEAL_LEN = 16
local CHECKSUM, ACK_REQUEST, SEALED = 0x01, 0x02, 0x04
local KNOWN_FLAGS = CHECKSUM + ACK_REQUEST + SEALED
-- A body longer than this is not a length this dissector can reason about
-- (Lua numbers are exact to 2^53): a stream holding one is not btl.
local MAX_BODY = 2 ^ 40

-- Bit operations: Lua 5.2's bit32 (Wireshark 4.0), else Wireshark's own
-- `bit`, else Lua 5.3's operators (compiled at run time, since 5.2 cannot
-- parse them).
local bit = bit32 or bit or load([[return {
    band = function(a, b) return a & b end,
    bxor = function(a, b) return a ~ b end,
    rshift = function(a, n) return a >> n end,
}]])()

-- Value strings.

local type_names = {
    [1] = "HELLO", [2] = "HELLO_ACK", [3] = "SEND", [4] = "PUT", [5] = "GET",
    [6] = "ACK", [7] = "CLOSE", [8] = "REJECT", [9] = "DONE", [10] = "NOTIFY",
    [11] = "KEY", [12] = "KEY_INFO", [13] = "COOKIE",
}

local close_reasons = {
    [0] = "Normal", [1] = "ProtocolError", [2] = "VersionMismatch",
    [3] = "AuthFailed", [4] = "Timeout", [5] = "ResourceExhausted",
    [6] = "Shutdown", [7] = "GaveUp",
}

local reject_codes = {
    [1] = "BadHandle", [2] = "OutOfBounds", [3] = "AccessDenied",
    [4] = "TooLarge", [5] = "NoTarget", [6] = "Busy",
}

local key_info_codes = { [0] = "Region" }
for code, name in pairs(reject_codes) do
    key_info_codes[code] = name
end

-- pinfo.p2p_dir: 0 sent, 1 received (a capture's epb_flags direction).
local directions = { [0] = "Sent", [1] = "Received" }

-- Layouts. Each field: name (the last part of its filter name), offset,
-- size, display ("dec", "hex" or "bytes"), label, and optionally value
-- strings (`strings`), flag bits (`bits`: name, label, mask) and whether it
-- must be zero (`reserved`). Offsets are from the start of the header, or
-- of the body.

local header = {
    { "type", 0, 1, "dec", "Type", strings = type_names },
    { "flags", 1, 1, "hex", "Flags", bits = {
        { "checksum", "CHECKSUM (a CRC32C trailer follows the body)", CHECKSUM },
        { "ack_request", "ACK_REQUEST (answer with an acknowledgement soon)", ACK_REQUEST },
        { "sealed", "SEALED (a seal ends the frame)", SEALED },
    } },
    { "reserved", 2, 2, "hex", "Reserved", reserved = true },
    { "credits", 4, 4, "dec", "Credits granted in total" },
    { "seq", 8, 8, "dec", "Sequence number" },
    { "ack", 16, 8, "dec", "Acknowledgement (first missing)" },
    { "body_len", 24, 8, "dec", "Body length" },
}

-- Bodies by type number. `len`: the fixed fields' length; `payload`: data
-- follows them (SEND, PUT); `reliable`: the packet carries a sequence
-- number.
local bodies = {
    [1] = { abbr = "hello", len = 64, fields = {
        { "magic", 0, 4, "bytes", "Magic" },
        { "version_major", 4, 1, "dec", "Major version" },
        { "version_minor", 5, 1, "dec", "Minor version" },
        { "link_index", 6, 2, "dec", "Link index" },
        { "job", 8, 8, "dec", "Job" },
        { "rank", 16, 4, "dec", "Rank" },
        { "capabilities", 20, 4, "hex", "Capabilities", bits = {
            { "crc32c", "CRC32C (checks and sends checksums)", 0x1 },
            { "job_key", "JOB_KEY (has a job key and proves it)", 0x2 },
        } },
        { "nonce", 24, 16, "bytes", "Nonce" },
        { "max_body", 40, 8, "dec", "Largest body accepted" },
        { "initial_credits", 48, 4, "dec", "Initial credits" },
        { "reserved", 52, 4, "hex", "Reserved", reserved = true },
        { "epoch", 56, 8, "hex", "Epoch" },
    } },
    [2] = { abbr = "hello_ack", len = 32, fields = {
        { "proof", 0, 32, "bytes", "Proof (HMAC-SHA256)" },
    } },
    [3] = { abbr = "send", len = 8, payload = true, reliable = true, fields = {
        { "tag", 0, 1, "dec", "Tag" },
        { "reserved", 1, 7, "bytes", "Reserved", reserved = true },
    } },
    [4] = { abbr = "put", len = 40, payload = true, reliable = true, fields = {
        { "xfer_id", 0, 8, "hex", "Transfer" },
        { "handle", 8, 8, "hex", "Registration" },
        { "offset", 16, 8, "dec", "Offset" },
        { "total_len", 24, 8, "dec", "Transfer length" },
        { "index", 32, 4, "dec", "Packet index" },
        { "count", 36, 4, "dec", "Packets in the transfer" },
    } },
    [5] = { abbr = "get", len = 64, reliable = true, fields = {
        { "xfer_id", 0, 8, "hex", "Transfer" },
        { "src_handle", 8, 8, "hex", "Source registration" },
        { "src_offset", 16, 8, "dec", "Source offset" },
        { "len", 24, 8, "dec", "Length" },
        { "target_job", 32, 8, "dec", "Target job" },
        { "target_rank", 40, 4, "dec", "Target rank" },
        { "reserved", 44, 4, "hex", "Reserved", reserved = true },
        { "dst_handle", 48, 8, "hex", "Destination registration" },
        { "dst_offset", 56, 8, "dec", "Destination offset" },
    } },
    [6] = { abbr = "ack", len = 8, fields = {
        { "sack", 0, 8, "hex", "Selective acknowledgement" },
    } },
    [7] = { abbr = "close", len = 8, reliable = true, fields = {
        { "reason", 0, 1, "dec", "Reason", strings = close_reasons },
        { "reserved", 1, 7, "bytes", "Reserved", reserved = true },
    } },
    [8] = { abbr = "reject", len = 16, reliable = true, fields = {
        { "xfer_id", 0, 8, "hex", "Transfer" },
        { "code", 8, 1, "dec", "Code", strings = reject_codes },
        { "reserved", 9, 7, "bytes", "Reserved", reserved = true },
    } },
    [9] = { abbr = "done", len = 8, reliable = true, fields = {
        { "xfer_id", 0, 8, "hex", "Transfer (the GET)" },
    } },
    [10] = { abbr = "notify", len = 40, reliable = true, fields = {
        { "xfer_id", 0, 8, "hex", "Transfer (the PUT)" },
        { "handle", 8, 8, "hex", "Registration" },
        { "offset", 16, 8, "dec", "Offset" },
        { "len", 24, 8, "dec", "Length" },
        { "imm", 32, 8, "hex", "Immediate value" },
    } },
    [11] = { abbr = "key", len = 8, reliable = true, fields = {
        { "key", 0, 8, "hex", "Registration key" },
    } },
    [12] = { abbr = "key_info", len = 40, reliable = true, fields = {
        { "key", 0, 8, "hex", "Registration key" },
        { "code", 8, 1, "dec", "Code", strings = key_info_codes },
        { "access", 9, 1, "hex", "Access", bits = {
            { "read", "Read", 0x1 },
            { "write", "Write", 0x2 },
        } },
        { "flags", 10, 1, "hex", "Flags", bits = {
            { "device", "DEVICE (the device holds the region)", 0x1 },
        } },
        { "reserved", 11, 5, "bytes", "Reserved", reserved = true },
        { "len", 16, 8, "dec", "Region length" },
        { "device_key", 24, 8, "hex", "Device key" },
        { "base", 32, 8, "hex", "Device address" },
    } },
    [13] = { abbr = "cookie", len = 16, fields = {
        { "cookie", 0, 16, "bytes", "Cookie" },
    } },
}

-- Protocol fields, made from the layouts.

local all_fields = {}

local function protofield(abbr, spec)
    local name, size, display, label = spec[1], spec[3], spec[4], spec[5]
    local full = abbr .. "." .. name
    local pf
    if display == "bytes" then
        pf = ProtoField.bytes(full, label)
    else
        local make = ({ [1] = ProtoField.uint8, [2] = ProtoField.uint16,
            [4] = ProtoField.uint32, [8] = ProtoField.uint64 })[size]
        pf = make(full, label, display == "hex" and base.HEX or base.DEC, spec.strings)
    end
    all_fields[#all_fields + 1] = pf
    spec.field = pf
    for _, b in ipairs(spec.bits or {}) do
        b.field = ProtoField.bool(full .. "." .. b[1], b[2], size * 8, nil, b[3])
        all_fields[#all_fields + 1] = b.field
    end
end

for _, spec in ipairs(header) do
    protofield("btl", spec)
end
for _, body in ipairs(bodies) do
    for _, spec in ipairs(body.fields) do
        protofield("btl." .. body.abbr, spec)
    end
end

local f_direction = ProtoField.uint8("btl.direction", "Direction", base.DEC, directions)
local f_payload = ProtoField.bytes("btl.payload", "Payload")
local f_crc32c = ProtoField.uint32("btl.crc32c", "CRC32C", base.HEX)
local f_seal = ProtoField.bytes("btl.seal", "Seal")
for _, pf in ipairs({ f_direction, f_payload, f_crc32c, f_seal }) do
    all_fields[#all_fields + 1] = pf
end
btl.fields = all_fields

-- Expert information.

local e_unknown_type = ProtoExpert.new("btl.expert.unknown_type", "Unknown packet type",
    expert.group.MALFORMED, expert.severity.ERROR)
local e_bad_length = ProtoExpert.new("btl.expert.bad_length",
    "Body length does not suit the packet type", expert.group.MALFORMED, expert.severity.ERROR)
local e_truncated = ProtoExpert.new("btl.expert.truncated",
    "Frame truncated: the capture kept only its first bytes",
    expert.group.UNDECODED, expert.severity.NOTE)
local e_short = ProtoExpert.new("btl.expert.short", "Frame cut short: the packet ends before it",
    expert.group.MALFORMED, expert.severity.ERROR)
local e_trailing = ProtoExpert.new("btl.expert.trailing", "Bytes after the frame",
    expert.group.MALFORMED, expert.severity.ERROR)
local e_reserved = ProtoExpert.new("btl.expert.reserved_not_zero", "Reserved field is not zero",
    expert.group.PROTOCOL, expert.severity.WARN)
local e_unknown_flags = ProtoExpert.new("btl.expert.unknown_flags", "Unknown flags are set",
    expert.group.PROTOCOL, expert.severity.WARN)
local e_seq = ProtoExpert.new("btl.expert.seq_not_zero",
    "Sequence number of an unnumbered packet is not zero",
    expert.group.PROTOCOL, expert.severity.WARN)
local e_bad_magic = ProtoExpert.new("btl.expert.bad_magic", "Not \"BTL\\0\": not a btl peer",
    expert.group.PROTOCOL, expert.severity.ERROR)
local e_version = ProtoExpert.new("btl.expert.unsupported_version", "Unsupported major version",
    expert.group.PROTOCOL, expert.severity.WARN)
local e_bad_checksum = ProtoExpert.new("btl.expert.bad_checksum", "CRC32C does not match",
    expert.group.CHECKSUM, expert.severity.ERROR)
local e_bad_field = ProtoExpert.new("btl.expert.bad_field", "Invalid field value",
    expert.group.PROTOCOL, expert.severity.WARN)
btl.experts = {
    e_unknown_type, e_bad_length, e_truncated, e_short, e_trailing, e_reserved,
    e_unknown_flags, e_seq, e_bad_magic, e_version, e_bad_checksum, e_bad_field,
}

-- CRC32C (Castagnoli, reflected, initial value and final XOR 0xffffffff).

local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if bit.band(c, 1) ~= 0 then
            c = bit.bxor(bit.rshift(c, 1), 0x82f63b78)
        else
            c = bit.rshift(c, 1)
        end
    end
    crc_table[i] = c
end

local function crc32c(bytes)
    local crc = 0xffffffff
    for i = 1, #bytes do
        local index = bit.band(bit.bxor(crc, bytes:byte(i)), 0xff)
        crc = bit.bxor(crc_table[index], bit.rshift(crc, 8))
    end
    return bit.bxor(crc, 0xffffffff)
end

-- Value helpers.

-- A UInt64 as 0x and its hex digits without leading zeros.
local function hex64(v)
    local digits = v:tohex():gsub("^0+", "")
    return "0x" .. (digits == "" and "0" or digits)
end

-- The value of field `spec` at `offset`: a number (up to 4 bytes), a
-- UInt64 (8 bytes) or a byte string (bytes).
local function value_of(tvb, offset, spec)
    local size = spec[3]
    if spec[4] == "bytes" then
        return tvb:raw(offset, size)
    elseif size == 8 then
        return tvb(offset, 8):uint64()
    end
    return tvb(offset, size):uint()
end

local function is_zero(v)
    if type(v) == "string" then
        return not v:find("[^\0]")
    elseif type(v) == "number" then
        return v == 0
    end
    return v == UInt64(0)
end

-- Adds the fields of `layout` at `base` that the capture holds and that
-- lie within `limit` bytes of `base`, and returns their values by name.
local function add_fields(tree, tvb, base, limit, layout)
    local values = {}
    for _, spec in ipairs(layout) do
        local offset, size = base + spec[2], spec[3]
        if spec[2] + size > limit or offset + size > tvb:len() then
            return values
        end
        local item = tree:add(spec.field, tvb(offset, size))
        for _, b in ipairs(spec.bits or {}) do
            item:add(b.field, tvb(offset, size))
        end
        local v = value_of(tvb, offset, spec)
        values[spec[1]] = v
        if spec.reserved and not is_zero(v) then
            item:add_proto_expert_info(e_reserved)
        end
    end
    return values
end

-- Info text of each body type, from the values of its fields (any may be
-- missing in a truncated frame).
local function num(v)
    return v and tostring(v) or "?"
end

local function hex(v)
    if v == nil then
        return "?"
    elseif type(v) == "number" then
        return string.format("0x%x", v)
    end
    return hex64(v)
end

local summaries = {
    [1] = function(v)
        return string.format("job=%s rank=%s link=%s v%s.%s", num(v.job), num(v.rank),
            num(v.link_index), num(v.version_major), num(v.version_minor))
    end,
    [3] = function(v, payload_len)
        return string.format("tag=%s len=%s", num(v.tag), num(payload_len))
    end,
    [4] = function(v, payload_len)
        return string.format("xfer=%s handle=%s offset=%s len=%s index=%s/%s",
            hex(v.xfer_id), hex(v.handle), num(v.offset), num(payload_len),
            num(v.index), num(v.count))
    end,
    [5] = function(v)
        return string.format("xfer=%s src=%s+%s len=%s target=(%s, %s) dst=%s+%s",
            hex(v.xfer_id), hex(v.src_handle), num(v.src_offset), num(v.len),
            num(v.target_job), num(v.target_rank), hex(v.dst_handle), num(v.dst_offset))
    end,
    [6] = function(v)
        return "sack=" .. hex(v.sack)
    end,
    [7] = function(v)
        return "reason=" .. (close_reasons[v.reason] or num(v.reason))
    end,
    [8] = function(v)
        return string.format("xfer=%s code=%s", hex(v.xfer_id),
            reject_codes[v.code] or num(v.code))
    end,
    [9] = function(v)
        return "xfer=" .. hex(v.xfer_id)
    end,
    [10] = function(v)
        return string.format("xfer=%s handle=%s offset=%s len=%s imm=%s", hex(v.xfer_id),
            hex(v.handle), num(v.offset), num(v.len), hex(v.imm))
    end,
    [11] = function(v)
        return "key=" .. hex(v.key)
    end,
    [12] = function(v)
        local access = ""
        if v.access then
            access = (bit.band(v.access, 1) ~= 0 and "r" or "-")
                .. (bit.band(v.access, 2) ~= 0 and "w" or "-")
        end
        return string.format("key=%s %s len=%s access=%s", hex(v.key),
            key_info_codes[v.code] or num(v.code), num(v.len), access)
    end,
}

-- Checks of a body's fields beyond reserved ones, as the decoder makes
-- them.
local function check_body(ptype, v, tree, payload_len)
    if ptype == 1 then
        if v.magic and v.magic ~= "BTL\0" then
            tree:add_proto_expert_info(e_bad_magic)
        end
        if v.version_major and v.version_major ~= 1 then
            tree:add_proto_expert_info(e_version)
        end
    elseif ptype == 4 and v.count then
        if v.index >= v.count then
            tree:add_proto_expert_info(e_bad_field, "index is not below count")
        end
        if payload_len and UInt64(payload_len) > v.total_len then
            tree:add_proto_expert_info(e_bad_field, "more data than the transfer length")
        end
    elseif ptype == 12 and v.base then
        local device = bit.band(v.flags, 1) ~= 0
        if v.code ~= 0 and not (v.access == 0 and v.flags == 0 and is_zero(v.len)
                and is_zero(v.device_key) and is_zero(v.base)) then
            tree:add_proto_expert_info(e_bad_field, "fields after a non-zero code must be 0")
        elseif bit.band(v.access, 0xfc) ~= 0 or bit.band(v.flags, 0xfe) ~= 0 then
            tree:add_proto_expert_info(e_bad_field, "unknown access or flags bits")
        elseif not device and not (is_zero(v.device_key) and is_zero(v.base)) then
            tree:add_proto_expert_info(e_bad_field, "device_key and base must be 0 without DEVICE")
        end
    end
end

-- Reads the header at `offset`: type, flags and the frame's length (nil
-- when the body length is beyond reason).
local function frame_len_at(tvb, offset)
    local body_len = tvb(offset + 24, 8):uint64()
    if body_len > UInt64(MAX_BODY) then
        return nil
    end
    local flags = tvb(offset + 1, 1):uint()
    local len = HEADER_LEN + body_len:tonumber()
    if bit.band(flags, CHECKSUM) ~= 0 then
        len = len + CHECKSUM_LEN
    end
    if bit.band(flags, SEALED) ~= 0 then
        len = len + SEAL_LEN
    end
    return len
end

-- Sets the Protocol and Info columns for one more frame of the packet:
-- several frames of a TCP segment share them.
local function set_columns(pinfo, text)
    if tostring(pinfo.cols.protocol) == "BTL" then
        pinfo.cols.info:append(" | " .. text)
    else
        pinfo.cols.protocol = "BTL"
        pinfo.cols.info = text
    end
end

-- Dissects the frame at the start of `tvb`. `datagram`: the record holds
-- exactly one frame, and bytes after it are an error. Returns the bytes
-- dissected.
local function dissect_frame(tvb, pinfo, tree, datagram)
    local captured, reported = tvb:len(), tvb:reported_len()
    local root = tree:add(btl, tvb(0, math.min(captured, math.max(reported, 0))))
    local direction = directions[pinfo.p2p_dir]
    if direction then
        root:add(f_direction, pinfo.p2p_dir):set_generated()
    end
    local prefix = direction and ("[" .. (pinfo.p2p_dir == 0 and "out" or "in") .. "] ") or ""

    if captured < HEADER_LEN then
        local values = add_fields(root, tvb, 0, HEADER_LEN, header)
        local summary = type_names[values.type] or "btl"
        if reported < HEADER_LEN then
            root:add_proto_expert_info(e_short, string.format(
                "Frame cut short: %d bytes, less than a header", reported))
            summary = summary .. " [cut short]"
        else
            root:add_proto_expert_info(e_truncated, string.format(
                "Truncated: %d bytes of the header captured", captured))
            summary = summary .. " [truncated]"
        end
        set_columns(pinfo, prefix .. summary)
        root:append_text(", " .. summary)
        return captured
    end

    local h = add_fields(root, tvb, 0, HEADER_LEN, header)
    local ptype, body = h.type, bodies[h.type]
    local name = type_names[ptype] or string.format("unknown type %d", ptype)
    if bit.band(h.flags, 0xff - KNOWN_FLAGS) ~= 0 then
        root:add_proto_expert_info(e_unknown_flags)
    end
    local summary = name
    if body and body.reliable then
        summary = summary .. " seq=" .. tostring(h.seq)
    elseif body and not is_zero(h.seq) then
        root:add_proto_expert_info(e_seq)
    end
    summary = summary .. " ack=" .. tostring(h.ack)
    if h.credits ~= 0 then
        summary = summary .. " credits=" .. h.credits
    end

    local frame_len = frame_len_at(tvb, 0)
    if not body or not frame_len then
        if not body then
            root:add_proto_expert_info(e_unknown_type)
        else
            root:add_proto_expert_info(e_bad_length)
        end
        set_columns(pinfo, prefix .. summary)
        root:append_text(", " .. summary)
        return captured
    end
    local body_len = h.body_len:tonumber()
    local fits
    if body.payload then
        fits = body_len >= body.len
    else
        fits = body_len == body.len
    end
    if not fits then
        root:add_proto_expert_info(e_bad_length, string.format(
            "Body length %d does not suit %s (%s%d bytes)", body_len, name,
            body.payload and "at least " or "", body.len))
    end

    local values = add_fields(root, tvb, HEADER_LEN, body_len, body.fields)
    check_body(ptype, values, root, body.payload and math.max(body_len - body.len, 0))
    local payload_len
    if body.payload and body_len > body.len then
        payload_len = body_len - body.len
        local offset = HEADER_LEN + body.len
        local have = math.min(payload_len, captured - offset)
        if have > 0 then
            root:add(f_payload, tvb(offset, have))
        end
    end
    local details = summaries[ptype] and summaries[ptype](values, payload_len or 0)
    if details then
        summary = summary .. " " .. details
    end

    local offset = HEADER_LEN + body_len
    if bit.band(h.flags, CHECKSUM) ~= 0 then
        if offset + CHECKSUM_LEN <= captured then
            local item = root:add(f_crc32c, tvb(offset, CHECKSUM_LEN))
            local computed = crc32c(tvb:raw(0, offset))
            if computed == tvb(offset, CHECKSUM_LEN):uint() then
                item:append_text(" [correct]")
            else
                item:add_proto_expert_info(e_bad_checksum, string.format(
                    "CRC32C does not match: computed 0x%08x", computed))
            end
        end
        offset = offset + CHECKSUM_LEN
    end
    if bit.band(h.flags, SEALED) ~= 0 then
        if offset + SEAL_LEN <= captured then
            root:add(f_seal, tvb(offset, SEAL_LEN))
        end
        offset = offset + SEAL_LEN
    end

    if reported < frame_len then
        root:add_proto_expert_info(e_short, string.format(
            "Frame cut short: %d of its %d bytes", reported, frame_len))
        summary = summary .. " [cut short]"
    elseif captured < frame_len then
        root:add_proto_expert_info(e_truncated, string.format(
            "Truncated: %d of its %d bytes captured", captured, frame_len))
        summary = summary .. " [truncated]"
    elseif datagram and reported > frame_len then
        local text = string.format("%d bytes after the frame", reported - frame_len)
        if captured > frame_len then
            root:add_tvb_expert_info(e_trailing, tvb(frame_len, captured - frame_len), text)
        else
            root:add_proto_expert_info(e_trailing, text)
        end
    end
    set_columns(pinfo, prefix .. summary)
    root:append_text(", " .. summary)
    return captured
end

function btl.dissector(tvb, pinfo, tree)
    return dissect_frame(tvb, pinfo, tree, true)
end

-- Over TCP: frames back to back, each as long as its header says.
local function tcp_frame_len(tvb, pinfo, offset)
    local len = frame_len_at(tvb, offset)
    local remaining = tvb:reported_length_remaining(offset)
    if not len or len > 0x7fffffff or not type_names[tvb(offset, 1):uint()] then
        -- Not a btl header: no frame boundary can be found any more.
        return remaining
    end
    return len
end

local function dissect_tcp_frame(tvb, pinfo, tree)
    return dissect_frame(tvb, pinfo, tree, false)
end

function btl_tcp.dissector(tvb, pinfo, tree)
    dissect_tcp_pdus(tvb, tree, HEADER_LEN, tcp_frame_len, dissect_tcp_frame, true)
    return tvb:len()
end

DissectorTable.get("udp.port"):add_for_decode_as(btl)
DissectorTable.get("tcp.port"):add_for_decode_as(btl_tcp)
DissectorTable.get("wtap_encap"):add(wtap_encaps.USER0, btl)
