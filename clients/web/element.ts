/**
 * `<svc-agent agent-id="..." core-api-endpoint="{base_url}">`: the embeddable conversational
 * agent. Shows the agent's public record (title, preview image) before the call; a click starts
 * the call (audio playback and the microphone are unlocked inside that gesture). Events and
 * states: docs/widget.md.
 */
import { SESSION_MESSAGE_LIMITS } from '../../protocol/session-messages.ts';
import { Call, CALL_DEFAULTS, type CallEnd, type CallHost, type LocalEnd } from './call.ts';
import type { ConnectionState, Outcome, WidgetBotState, WindowEventName } from './events.ts';
import { WidgetView, type View } from './ui.ts';
import { WIDGET_VERSION } from '../../protocol/widget-version.ts';

/** Plain-words messages for endings shown as errors. */
const ERROR_TEXT: Partial<Record<Outcome, string>> = {
  mic_permission_denied: 'Microphone access is blocked. Allow the microphone for this site in your browser settings, then try again.',
  mic_unavailable: 'No working microphone was found. Connect one, then try again.',
  unsupported_browser: 'This browser cannot hold voice conversations. Please use a recent Chrome, Edge, Firefox or Safari.',
  agent_unavailable: 'This agent is not available right now.',
  not_allowed: 'This agent cannot be used on this website.',
  invalid_settings: 'This conversation is not set up correctly on this website.',
  queue_timeout: 'All lines are still busy. Please try again in a few minutes.',
  service_error: 'The service could not start the conversation. Please try again.',
  network_error: 'The service could not be reached. Check your connection and try again.',
  connection_failed: 'The connection could not be set up. Please try again.',
  connection_timeout: 'Connecting took too long. Please try again.',
  ice_failed: 'Your network blocked the audio and video connection. Try another network, or ask the site owner to enable a relay.',
  transport_lost: 'The connection was lost.',
  agent_error: 'The agent ran into a problem and ended the conversation.',
  service_shutdown: 'The service restarted and ended the conversation. Please start again.',
};

/** Normal endings: the "ended" view. */
const ENDED: ReadonlySet<Outcome> = new Set<Outcome>(['ended_by_visitor', 'ended_by_agent', 'time_limit_reached', 'element_removed', 'page_closed']);

const TIME_LIMIT_TEXT = 'The conversation reached its time limit.';

function newInstanceId(): string {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  const bytes = new Uint8Array(16);
  if (c && typeof c.getRandomValues === 'function') c.getRandomValues(bytes);
  else for (let i = 0; i < 16; i++) bytes[i] = Math.floor(Math.random() * 256);
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function seconds(value: string | null, fallbackMs: number): number {
  const n = value === null ? NaN : Number(value);
  return Number.isFinite(n) && n > 0 ? n * 1000 : fallbackMs;
}

export function createElementClass(scriptStart: number) {
  return class SvcAgentElement extends HTMLElement {
    static readonly version = WIDGET_VERSION;
    static get observedAttributes(): string[] {
      return ['agent-id', 'core-api-endpoint'];
    }

    /** Identifies this element in SvcSessionOutcome and the telemetry reports. */
    readonly instanceId = newInstanceId();
    private readonly view: WidgetView;
    private call: Call | null = null;
    private state: ConnectionState = 'disconnected';
    private bot: WidgetBotState = 'disconnected';
    private queued = false;
    private isMuted = false;
    private botSpeaking = false;
    private micPending = false;
    private audioContext: AudioContext | null = null;
    private recordAbort: AbortController | null = null;
    private recordKey = '';
    private recordMessage: string | null = null;
    private readonly onPageHide = () => this.call?.end('page_closed');

    constructor() {
      super();
      this.view = new WidgetView(this.attachShadow({ mode: 'open' }));
      this.view.startButton.addEventListener('click', () => this.start());
      this.view.hangupButton.addEventListener('click', () => this.hangUp());
      this.view.muteButton.addEventListener('click', () => {
        this.muted = !this.muted;
      });
      // A click is the gesture the browser wanted: start the sound (and the level analysis).
      this.view.soundButton.addEventListener('click', () => {
        void this.audioContext?.resume().catch(() => undefined);
        void this.view.audio.play().then(() => this.view.setSoundBlocked(false), () => undefined);
      });
    }

    connectedCallback(): void {
      window.addEventListener('pagehide', this.onPageHide);
      this.loadRecord();
    }

    disconnectedCallback(): void {
      // A move within the document disconnects and reconnects at once: only a real removal ends the call.
      queueMicrotask(() => {
        if (this.isConnected) return;
        window.removeEventListener('pagehide', this.onPageHide);
        this.endCall('element_removed');
        void this.audioContext?.close().catch(() => undefined);
        this.audioContext = null;
      });
    }

    attributeChangedCallback(): void {
      if (this.isConnected) this.loadRecord();
    }

    // ---- public API ------------------------------------------------------------------------

    get connectionState(): ConnectionState {
      return this.state;
    }

    get botState(): WidgetBotState {
      return this.bot;
    }

    get queuing(): boolean {
      return this.queued;
    }

    /** The running call's session id; null before the connect request succeeded and after the call ended. */
    get sessionId(): string | null {
      return this.call?.sessionId ?? null;
    }

    get muted(): boolean {
      return this.isMuted;
    }

    set muted(value: boolean) {
      this.isMuted = !!value;
      this.call?.setMuted(this.isMuted);
      this.view.setMuted(this.isMuted);
    }

    /**
     * Starts a call. Call it from a user gesture (a click): audio playback and the microphone are
     * unlocked inside it. Does nothing while a call is running; from a handler of the call's end
     * (`SvcSessionOutcome`, which fires before the widget shows its ended view) it starts the next one.
     */
    start(): void {
      if (this.call && !this.call.ended) return;
      const startClicked = performance.now();
      this.unlockAudio();
      const agentId = this.getAttribute('agent-id')?.trim() ?? '';
      const endpoint = this.endpoint();
      this.botSpeaking = false;
      const call = new Call(this.host(), {
        endpoint,
        agentId,
        instanceId: this.instanceId,
        clientUserRef: this.getAttribute('client-user-ref'),
        authToken: this.getAttribute('auth-token'),
        setupTimeoutMs: seconds(this.getAttribute('connect-timeout'), CALL_DEFAULTS.setupTimeoutMs),
        queueTimeoutMs: seconds(this.getAttribute('queue-timeout'), CALL_DEFAULTS.queueTimeoutMs),
        scriptStart,
        startClicked,
      });
      this.call = call;
      this.refresh();
      if (!agentId || !endpoint) console.error('svc-agent: the agent-id and core-api-endpoint attributes are required');
      void call.run();
    }

    /** Ends the call (hang-up, or cancels one that is connecting); the session is released. */
    hangUp(): void {
      this.endCall('visitor');
    }

    /**
     * Adds `text` to the agent's context for later turns (append-system-context; no reply is forced).
     * Returns false when no call is connected. At most 4,000 characters.
     */
    appendSystemContext(text: string): boolean {
      if (typeof text !== 'string') throw new TypeError('appendSystemContext(text): text must be a string');
      if (text.length > SESSION_MESSAGE_LIMITS.maxContextTextLength) throw new RangeError(`appendSystemContext(text): at most ${SESSION_MESSAGE_LIMITS.maxContextTextLength} characters`);
      return this.call?.appendSystemContext(text) ?? false;
    }

    // ---- internals -------------------------------------------------------------------------

    private endCall(reason: LocalEnd): void {
      this.call?.end(reason);
    }

    private endpoint(): string {
      return (this.getAttribute('core-api-endpoint') ?? '').trim().replace(/\/+$/, '').replace(/\/v1$/, '');
    }

    /** Inside the click: resume an AudioContext and start the audio element on a silent stream (iOS/Safari autoplay). */
    private unlockAudio(): void {
      const Ctor = window.AudioContext ?? (window as unknown as { webkitAudioContext?: typeof AudioContext }).webkitAudioContext;
      if (!this.audioContext && Ctor) {
        try {
          this.audioContext = new Ctor();
        } catch {
          this.audioContext = null;
        }
      }
      const ctx = this.audioContext;
      if (ctx) {
        void ctx.resume().catch(() => undefined);
        try {
          const audio = this.view.audio;
          audio.srcObject = ctx.createMediaStreamDestination().stream;
          audio.muted = false;
          void audio.play().catch(() => undefined);
        } catch {
          // no MediaStreamDestination: the element is started when the bot's track arrives
        }
      }
    }

    private host(): CallHost {
      // eslint-disable-next-line @typescript-eslint/no-this-alias
      const el = this;
      return {
        video: el.view.video,
        audio: el.view.audio,
        get audioContext() {
          return el.audioContext;
        },
        get muted() {
          return el.isMuted;
        },
        get connectionState() {
          return el.state;
        },
        get botState() {
          return el.bot;
        },
        dispatch: (name, detail) => el.dispatchEvent(new CustomEvent(name, { detail, bubbles: true, composed: true })),
        dispatchOnWindow: (name: WindowEventName, detail) => window.dispatchEvent(new CustomEvent(name, { detail })),
        setConnectionState: (state) => {
          if (state === el.state) return;
          el.state = state;
          el.dispatchEvent(new CustomEvent('UpdateConnectionState', { detail: { connectionState: state }, bubbles: true, composed: true }));
          el.refresh();
        },
        setBotState: (state) => {
          if (state === el.bot) return;
          el.bot = state;
          el.dispatchEvent(new CustomEvent('UpdateBotState', { detail: { botState: state }, bubbles: true, composed: true }));
          el.refresh();
        },
        setQueuing: (queuing) => {
          if (queuing === el.queued) return;
          el.queued = queuing;
          el.dispatchEvent(new CustomEvent('UpdateQueuing', { detail: { queuing }, bubbles: true, composed: true }));
          el.refresh();
        },
        setMicrophonePending: (pending) => {
          el.micPending = pending;
          el.refresh();
        },
        setBotSpeaking: (speaking) => {
          el.botSpeaking = speaking;
          el.refresh();
        },
        setSoundBlocked: (blocked) => el.view.setSoundBlocked(blocked),
        showVideo: () => el.view.setVideoShown(true),
        callEnded: (call, end) => el.callEnded(call, end),
      };
    }

    private callEnded(call: Call, end: CallEnd): void {
      // A handler of the end's outcome event already started the next call: it is that call's view.
      if (this.call !== call) return;
      this.call = null;
      // Its audio thread stops with the call (a page left open kept it running); the next start()
      // resumes it inside its click.
      void this.audioContext?.suspend().catch(() => undefined);
      this.botSpeaking = false;
      this.micPending = false;
      if (end.outcome === 'cancelled') this.view.show('idle', this.recordMessage ?? undefined);
      else if (ENDED.has(end.outcome)) this.view.show('ended', end.outcome === 'time_limit_reached' ? TIME_LIMIT_TEXT : undefined);
      else this.view.show('error', ERROR_TEXT[end.outcome] ?? 'Something went wrong. Please try again.');
    }

    /** The view of a running call, from its states. */
    private refresh(): void {
      if (!this.call) return;
      let view: View;
      if (this.micPending) view = 'microphone';
      else if (this.queued) view = 'queued';
      else if (this.state !== 'ready' && this.state !== 'reconnecting') view = 'connecting';
      else if (this.botSpeaking || this.bot === 'speaking') view = 'speaking';
      else if (this.bot === 'thinking') view = 'thinking';
      else view = 'listening';
      if (view !== this.view.view) this.view.show(view);
    }

    /** GET {core-api-endpoint}/v1/public/agents/{agent_id}: title and preview image before the call. */
    private loadRecord(): void {
      const agentId = this.getAttribute('agent-id')?.trim() ?? '';
      const endpoint = this.endpoint();
      const key = `${endpoint}|${agentId}`;
      if (key === this.recordKey) return;
      this.recordKey = key;
      this.recordAbort?.abort();
      if (!agentId || !endpoint) {
        this.recordMessage = 'This widget needs its agent-id and core-api-endpoint attributes.';
        if (!this.call) this.view.show('idle', this.recordMessage);
        return;
      }
      const abort = new AbortController();
      this.recordAbort = abort;
      this.dataset.record = 'loading';
      void fetch(`${endpoint}/v1/public/agents/${encodeURIComponent(agentId)}`, { signal: abort.signal, credentials: 'omit' })
        .then(async (response) => {
          const body = (await response.json().catch(() => null)) as { title?: unknown; preview_url?: unknown } | null;
          if (abort.signal.aborted) return;
          if (response.ok && body) {
            this.recordMessage = null;
            this.view.setAgent(typeof body.title === 'string' ? body.title : '', typeof body.preview_url === 'string' ? body.preview_url : null);
            this.dataset.record = 'loaded';
          } else {
            this.recordMessage = response.status === 404 || response.status === 403 ? 'This agent is not available.' : null;
            this.dataset.record = 'unavailable';
          }
          if (!this.call && this.view.view === 'idle') this.view.show('idle', this.recordMessage ?? undefined);
        })
        .catch(() => {
          if (!abort.signal.aborted) this.dataset.record = 'unavailable';
        });
    }
  };
}
