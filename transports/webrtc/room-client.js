/*
 * Browser client for the embedded rooms (plain script, no build step; served by the server at
 * GET /v1/rooms/client.js). It joins a room over the signalling WebSocket and receives the
 * avatar's tracks. Protocol: docs/webrtc.md.
 *
 *   const room = await SvcRoom.join({ url: 'wss://host/v1/rooms/signal', room, token });
 *   room.on('track', ({ track, stream }) => { video.srcObject = stream; });
 *   room.on('unpublished', () => ...); room.on('closed', ({ reason }) => ...);
 *   room.leave();
 *
 * Messages from the bot arrive as room.on('message', payload); a client-mode tool call is also
 * dispatched on window as the `svcToolCall` CustomEvent (turn off with `toolCallEvents: false`).
 * room.sendMessage({ type: 'client-ready', version: '1.0.0' }) sends a message to the bot
 * (`client_message`; a JSON object, at most 16 KiB); it returns whether the socket took it.
 *
 * With `microphone: track` (from getUserMedia) the track is sent back on the avatar's audio
 * transceiver, so the bot hears the user over the same peer connection.
 *
 * ICE: the STUN/TURN servers (with a TURN credential minted for this join) and the transport
 * policy come from the server's `joined` message (`iceServers` / `iceTransportPolicy` options
 * override them). When the peer connection goes `disconnected` or `failed` after it had
 * connected (the network changed: Wi-Fi to mobile), the client asks the server for an ICE
 * restart (`restart_ice`) every `iceRestartIntervalMs` (2 s) until it is connected again
 * (`iceRestart: false` turns that off); `room.iceRestarts` counts the requests. When two requests
 * go unanswered, the signalling socket itself is taken for dead (browsers keep a socket whose local
 * address vanished): the client opens a new one and joins again with the same token (`rejoined`
 * event, `room.rejoins`); the server replaces the old connection and offers a new peer connection.
 * TURN/STUN errors the browser reports are kept in `room.iceErrors` ({url, errorCode, errorText}).
 *
 * `signal` (an AbortSignal): aborted before the room is joined, the join gives up (its promise
 * rejects with code `aborted`) and closes its socket.
 *
 * The token travels in the first message, never in the URL.
 */
(function (global) {
  'use strict';

  function RoomError(code, message, fatal) {
    var error = new Error(message);
    error.name = 'RoomError';
    error.code = code;
    error.fatal = !!fatal;
    return error;
  }

  function join(options) {
    if (!options || !options.url || !options.token) return Promise.reject(RoomError('invalid_settings', 'url and token are required', true));
    var listeners = {};
    var ws = null;
    var pc = null;
    var pcId = null;
    var left = false;
    var iceServers = options.iceServers || [];
    var iceTransportPolicy = options.iceTransportPolicy || 'all';
    var restartTimer = null;
    var everConnected = false;
    var restartInterval = options.iceRestartIntervalMs || 2000;
    var unanswered = 0;
    var joined = false;
    var settle = null;
    var connection = {
      participantId: null,
      room: null,
      publisher: null,
      /** ICE restarts asked of the server since joining. */
      iceRestarts: 0,
      /** Times the signalling socket was opened again (a network change left the old one dead). */
      rejoins: 0,
      /** STUN/TURN errors the browser reported ({url, errorCode, errorText}), newest last (at most 20). */
      iceErrors: [],
      /** The tracks currently received (replaced on a new publication). */
      stream: new MediaStream(),
      get peerConnection() { return pc; },
      on: function (event, fn) { (listeners[event] = listeners[event] || []).push(fn); return connection; },
      off: function (event, fn) { listeners[event] = (listeners[event] || []).filter(function (f) { return f !== fn; }); return connection; },
      /**
       * Sends a message to the bot (the session protocol: client-ready, append-system-context,
       * hang-up). Returns false when the socket is not open (nothing is queued).
       */
      sendMessage: function (message) {
        if (!message || typeof message !== 'object' || Array.isArray(message)) throw new TypeError('sendMessage expects a JSON object');
        if (ws.readyState !== WebSocket.OPEN || left) return false;
        ws.send(JSON.stringify({ type: 'client_message', message: message }));
        return true;
      },
      /** Sends a raw protocol message (tests use it to exercise the server's checks). */
      send: function (message) { ws.send(typeof message === 'string' ? message : JSON.stringify(message)); },
      leave: function () {
        if (left) return;
        left = true;
        try { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'leave' })); } catch (e) { /* socket already gone */ }
        endPeer();
        ws.close();
      },
    };

    // Messages from the bot. A client-mode tool call becomes the `svcToolCall` CustomEvent on
    // window, detail { function_name, tool_call_id, arguments (an object) }: one-way, nothing
    // is answered. Every message is also emitted as `message` on the room connection.
    function deliverAppMessage(payload) {
      if (!payload || typeof payload !== 'object') return;
      if (payload.type === 'tool-call' && typeof payload.function_name === 'string' && options.toolCallEvents !== false && typeof global.dispatchEvent === 'function') {
        var args = payload.arguments;
        if (typeof args === 'string') { try { args = JSON.parse(args); } catch (e) { args = {}; } }
        if (!args || typeof args !== 'object' || Array.isArray(args)) args = {};
        global.dispatchEvent(new CustomEvent('svcToolCall', { detail: { function_name: payload.function_name, tool_call_id: String(payload.tool_call_id || ''), arguments: args } }));
      }
      emit('message', payload);
    }

    function emit(event, detail) {
      (listeners[event] || []).slice().forEach(function (fn) {
        try { fn(detail); } catch (e) { setTimeout(function () { throw e; }); }
      });
    }

    function send(message) {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
    }

    function stopRestarts() {
      if (restartTimer !== null) clearInterval(restartTimer);
      restartTimer = null;
    }

    function askRestart() {
      if (!pc || left) return stopRestarts();
      var state = pc.connectionState;
      if (state === 'connected' || state === 'closed') return stopRestarts();
      // Two requests without an offer: the signalling socket itself is dead (its address is gone
      // with the network change; browsers keep such a socket open). Join again on a new one.
      if (unanswered >= 2) return rejoin();
      unanswered++;
      connection.iceRestarts++;
      send({ type: 'restart_ice', pc_id: pcId });
    }

    // A new signalling socket with the same token: the server replaces the old connection and
    // offers a new peer connection (a new pc_id), which acceptOffer takes as usual.
    function rejoin() {
      stopRestarts();
      unanswered = 0;
      var old = ws;
      if (old) {
        old.onopen = old.onmessage = old.onclose = null;
        try { old.close(); } catch (e) { /* already gone */ }
      }
      connection.rejoins++;
      openSocket();
    }

    function endPeer() {
      stopRestarts();
      everConnected = false;
      if (!pc) return;
      var tracks = connection.stream.getTracks();
      pc.ontrack = null;
      pc.onicecandidate = null;
      pc.close(); // the received tracks end with their peer connection
      pc = null;
      pcId = null;
      tracks.forEach(function (t) { connection.stream.removeTrack(t); emit('trackended', { track: t }); });
    }

    // A new offer for the current peer connection: the server's answer to an ICE restart.
    function acceptRestart(message) {
      var peer = pc;
      unanswered = 0;
      peer.setRemoteDescription({ type: 'offer', sdp: message.sdp })
        .then(function () { return peer.createAnswer(); })
        .then(function (answer) { return peer.setLocalDescription(answer); })
        .then(function () { if (pc === peer) send({ type: 'answer', pc_id: message.pc_id, sdp: peer.localDescription.sdp }); })
        .catch(function (e) { emit('error', RoomError('negotiation_failed', String(e && e.message || e), false)); });
    }

    function acceptOffer(message) {
      if (pc && message.pc_id === pcId) return acceptRestart(message);
      endPeer();
      pcId = message.pc_id;
      var peer = new RTCPeerConnection({ iceServers: iceServers, iceTransportPolicy: iceTransportPolicy });
      pc = peer;
      peer.onicecandidateerror = function (event) {
        connection.iceErrors.push({ url: event.url, errorCode: event.errorCode, errorText: event.errorText });
        if (connection.iceErrors.length > 20) connection.iceErrors.shift();
        emit('iceerror', { url: event.url, errorCode: event.errorCode, errorText: event.errorText });
      };
      peer.ontrack = function (event) {
        connection.stream.addTrack(event.track);
        emit('track', { track: event.track, stream: connection.stream });
      };
      peer.onicecandidate = function (event) {
        var c = event.candidate;
        send({ type: 'candidate', pc_id: message.pc_id, candidate: c ? { candidate: c.candidate, sdpMid: c.sdpMid, sdpMLineIndex: c.sdpMLineIndex, usernameFragment: c.usernameFragment } : null });
      };
      peer.onconnectionstatechange = function () {
        if (pc !== peer) return;
        var state = peer.connectionState;
        emit('connectionstatechange', { state: state });
        if (state === 'connected') {
          everConnected = true;
          unanswered = 0;
          stopRestarts();
          emit('connected', {});
        } else if ((state === 'disconnected' || state === 'failed') && everConnected && options.iceRestart !== false && restartTimer === null) {
          askRestart();
          restartTimer = setInterval(askRestart, restartInterval);
        }
      };
      peer.setRemoteDescription({ type: 'offer', sdp: message.sdp })
        .then(function () {
          if (!options.microphone) return undefined;
          var audio = peer.getTransceivers().filter(function (t) { return t.receiver.track && t.receiver.track.kind === 'audio'; })[0];
          if (!audio) return undefined;
          audio.direction = 'sendrecv';
          return audio.sender.replaceTrack(options.microphone);
        })
        .then(function () { return peer.createAnswer(); })
        .then(function (answer) { return peer.setLocalDescription(answer); })
        .then(function () { if (pc === peer) send({ type: 'answer', pc_id: message.pc_id, sdp: peer.localDescription.sdp }); })
        .catch(function (e) { emit('error', RoomError('negotiation_failed', String(e && e.message || e), false)); });
    }

    function openSocket() {
      var socket = new WebSocket(options.url);
      ws = socket;
      socket.onopen = function () {
        if (socket !== ws) return;
        var first = { type: 'join', token: options.token };
        if (options.room) first.room = options.room;
        socket.send(JSON.stringify(first));
      };
      socket.onmessage = function (event) {
        if (socket !== ws) return;
        var message;
        try { message = JSON.parse(event.data); } catch (e) { return; }
        if (!message || typeof message !== 'object') return;
        switch (message.type) {
          case 'joined': {
            var again = joined;
            joined = true;
            connection.participantId = message.participant_id;
            connection.room = message.room;
            connection.publisher = message.publisher;
            if (!options.iceServers && Array.isArray(message.ice_servers)) iceServers = message.ice_servers;
            if (!options.iceTransportPolicy && message.ice_transport_policy === 'relay') iceTransportPolicy = 'relay';
            if (again) emit('rejoined', message);
            else {
              settle.resolve(connection);
              emit('joined', message);
            }
            break;
          }
          case 'offer':
            connection.publisher = connection.publisher || { participant_id: message.publisher_id, tracks: [] };
            acceptOffer(message);
            break;
          case 'candidate':
            if (pc && message.pc_id === pcId && message.candidate) pc.addIceCandidate(message.candidate).catch(function () { /* stale */ });
            break;
          case 'unpublished':
            endPeer();
            connection.publisher = null;
            emit('unpublished', message);
            break;
          case 'error': {
            var error = RoomError(message.code, message.message, message.fatal);
            if (!joined && message.fatal) settle.reject(error);
            emit('error', error);
            break;
          }
          case 'closed':
            emit('closed', { reason: message.reason });
            break;
          case 'app_message':
            deliverAppMessage(message.message);
            break;
          default:
            emit('message', message);
        }
      };
      socket.onclose = function (event) {
        if (socket !== ws) return;
        endPeer();
        if (!joined) settle.reject(RoomError('connection_closed', 'signalling closed before joining (' + event.code + ')', true));
        emit('disconnected', { code: event.code, reason: event.reason });
      };
    }

    var signal = options.signal;
    if (signal && signal.aborted) return Promise.reject(RoomError('aborted', 'the join was given up', true));
    return new Promise(function (resolve, reject) {
      settle = { resolve: resolve, reject: reject };
      // Given up before it joined (the page's call ended): the socket is closed, nothing is kept.
      if (signal) {
        signal.addEventListener('abort', function () {
          if (joined || left) return;
          left = true;
          endPeer();
          if (ws) { ws.onopen = ws.onmessage = ws.onclose = null; try { ws.close(); } catch (e) { /* already gone */ } }
          reject(RoomError('aborted', 'the join was given up', true));
        }, { once: true });
      }
      openSocket();
    });
  }

  global.SvcRoom = { join: join };
})(typeof window !== 'undefined' ? window : globalThis);
