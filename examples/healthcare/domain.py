"""`healthcare`: a clinic's appointment desk as a tau-bench domain of one's own.

Everything a domain needs, in one file next to its data: the database's shape (pydantic models over
``db.json``), the agent's tools over it (a tau2 `ToolKitBase`; each tool's docstring is the schema the policy
sees), the policy the agent must follow (``policy.md``), and the tasks with their gold actions
(``tasks.json``, split by ``split_tasks.json``). Registering the `Domain` subclass under a name is all ctu needs:
a spec names ``healthcare`` in `data.train` and `data.test_sets` like tau2's own domains, and tau2's evaluator
scores an episode by replaying the task's gold actions on a fresh database and comparing the two (``DB``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ctu.components.domains import Domain
from ctu.registry import registry
from tau_bench_env.runtime import prepare

prepare()  # tau2 quiet and offline (no loguru output, no litellm download) before it is imported
from tau2.data_model.tasks import Task  # noqa: E402
from tau2.environment.db import DB  # noqa: E402
from tau2.environment.environment import Environment  # noqa: E402
from tau2.environment.toolkit import ToolKitBase, ToolType, is_tool  # noqa: E402

HERE = Path(__file__).parent


class Patient(BaseModel):
    patient_id: str = Field(description="Unique identifier, e.g. P001")
    name: str = Field(description="Full name")
    date_of_birth: str = Field(description="YYYY-MM-DD")
    phone: str = Field(description="Contact phone number")
    appointments: list[str] = Field(description="IDs of the patient's appointments, past and future")


class Doctor(BaseModel):
    doctor_id: str = Field(description="Unique identifier, e.g. D01")
    name: str = Field(description="Full name with title")
    specialty: str = Field(description="e.g. cardiology, dermatology, pediatrics, general")
    free_slots: list[str] = Field(description="Bookable start times, YYYY-MM-DDTHH:MM, sorted")


class Appointment(BaseModel):
    appointment_id: str = Field(description="Unique identifier, e.g. A001")
    patient_id: str
    doctor_id: str
    slot: str = Field(description="Start time, YYYY-MM-DDTHH:MM")
    reason: str
    status: Literal["scheduled", "cancelled"]


class ClinicDB(DB):
    """Patients, doctors with their free slots, and appointments."""

    patients: dict[str, Patient]
    doctors: dict[str, Doctor]
    appointments: dict[str, Appointment]


class ClinicTools(ToolKitBase):
    """The tools of the clinic's front-desk agent."""

    db: ClinicDB

    def __init__(self, db: ClinicDB) -> None:
        super().__init__(db)

    def _patient(self, patient_id: str) -> Patient:
        if patient_id not in self.db.patients:
            raise ValueError(f"Patient {patient_id} not found")
        return self.db.patients[patient_id]

    def _doctor(self, doctor_id: str) -> Doctor:
        if doctor_id not in self.db.doctors:
            raise ValueError(f"Doctor {doctor_id} not found")
        return self.db.doctors[doctor_id]

    def _appointment(self, appointment_id: str) -> Appointment:
        if appointment_id not in self.db.appointments:
            raise ValueError(f"Appointment {appointment_id} not found")
        return self.db.appointments[appointment_id]

    @is_tool(ToolType.READ)
    def find_patient(self, name: str, date_of_birth: str) -> str:
        """Find a patient by full name and date of birth (both must match).

        Args:
            name: The patient's full name, e.g. 'Maria Lopez'.
            date_of_birth: The patient's date of birth, YYYY-MM-DD.

        Returns:
            The patient's ID.
        """
        for patient in self.db.patients.values():
            if patient.name.lower() == name.strip().lower() and patient.date_of_birth == date_of_birth.strip():
                return patient.patient_id
        raise ValueError("No patient with this name and date of birth")

    @is_tool(ToolType.READ)
    def get_patient_details(self, patient_id: str) -> Patient:
        """The patient's record, with the IDs of their appointments.

        Args:
            patient_id: The patient's ID, e.g. 'P001'.
        """
        return self._patient(patient_id)

    @is_tool(ToolType.READ)
    def get_appointment_details(self, appointment_id: str) -> Appointment:
        """One appointment: patient, doctor, time, reason and status.

        Args:
            appointment_id: The appointment's ID, e.g. 'A001'.
        """
        return self._appointment(appointment_id)

    @is_tool(ToolType.READ)
    def list_doctors(self, specialty: str) -> list[Doctor]:
        """The doctors of a specialty, with their free slots.

        Args:
            specialty: One of 'general', 'cardiology', 'dermatology', 'pediatrics'.
        """
        doctors = [d for d in self.db.doctors.values() if d.specialty == specialty.strip().lower()]
        if not doctors:
            raise ValueError(f"No doctors with specialty {specialty}")
        return doctors

    @is_tool(ToolType.WRITE)
    def book_appointment(self, patient_id: str, doctor_id: str, slot: str, reason: str) -> Appointment:
        """Book a free slot of a doctor for a patient.

        Args:
            patient_id: The patient's ID.
            doctor_id: The doctor's ID.
            slot: One of the doctor's free slots, YYYY-MM-DDTHH:MM.
            reason: Why the patient is coming, in a few words.

        Returns:
            The new appointment.
        """
        patient = self._patient(patient_id)
        doctor = self._doctor(doctor_id)
        if slot not in doctor.free_slots:
            raise ValueError(f"Slot {slot} is not free for {doctor_id}")
        appointment_id = f"A{len(self.db.appointments) + 1:03d}"
        appointment = Appointment(appointment_id=appointment_id, patient_id=patient_id, doctor_id=doctor_id,
                                  slot=slot, reason=reason, status="scheduled")
        self.db.appointments[appointment_id] = appointment
        doctor.free_slots.remove(slot)
        patient.appointments.append(appointment_id)
        return appointment

    @is_tool(ToolType.WRITE)
    def cancel_appointment(self, appointment_id: str) -> Appointment:
        """Cancel a scheduled appointment; its slot becomes free again.

        Args:
            appointment_id: The appointment's ID.
        """
        appointment = self._appointment(appointment_id)
        if appointment.status != "scheduled":
            raise ValueError(f"Appointment {appointment_id} is not scheduled")
        appointment.status = "cancelled"
        doctor = self._doctor(appointment.doctor_id)
        doctor.free_slots = sorted([*doctor.free_slots, appointment.slot])
        return appointment

    @is_tool(ToolType.WRITE)
    def reschedule_appointment(self, appointment_id: str, new_slot: str) -> Appointment:
        """Move a scheduled appointment to another free slot of the same doctor.

        Args:
            appointment_id: The appointment's ID.
            new_slot: One of the same doctor's free slots, YYYY-MM-DDTHH:MM.
        """
        appointment = self._appointment(appointment_id)
        if appointment.status != "scheduled":
            raise ValueError(f"Appointment {appointment_id} is not scheduled")
        doctor = self._doctor(appointment.doctor_id)
        if new_slot not in doctor.free_slots:
            raise ValueError(f"Slot {new_slot} is not free for {doctor.doctor_id}")
        doctor.free_slots.remove(new_slot)
        doctor.free_slots = sorted([*doctor.free_slots, appointment.slot])
        appointment.slot = new_slot
        return appointment

    @is_tool(ToolType.WRITE)
    def update_phone(self, patient_id: str, phone: str) -> Patient:
        """Change the patient's contact phone number.

        Args:
            patient_id: The patient's ID.
            phone: The new number, e.g. '555-0199'.
        """
        patient = self._patient(patient_id)
        patient.phone = phone
        return patient

    @is_tool(ToolType.GENERIC)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the patient to a human agent, with a summary of their request. Only when the patient asks
        for a person, or the request is outside what the policy and tools allow.

        Args:
            summary: What the patient needs.
        """
        return "Transfer successful"


@registry.domains.register("healthcare")
class Healthcare(Domain):
    """A clinic's appointment desk: find patients, book, cancel and reschedule appointments (an example domain)."""

    splits = ("train", "test", "base")

    def make_environment(self) -> Environment:
        """A fresh environment: the tools over a fresh copy of ``db.json``, and ``policy.md``."""
        db = ClinicDB.load(str(HERE / "db.json"))
        return Environment(domain_name="healthcare", policy=(HERE / "policy.md").read_text(), tools=ClinicTools(db))

    def load_tasks(self, split: str) -> list[Task]:
        """The tasks of `split` (``base``: all of them), in ``tasks.json``'s order.

        Raises:
            ValueError: `split` is not one of `splits`.
        """
        if split not in self.splits:
            raise ValueError(f"domain {self.name!r} has no split {split!r}; its splits: {', '.join(self.splits)}")
        tasks = [Task.model_validate(task) for task in json.loads((HERE / "tasks.json").read_text())]
        if split == "base":
            return tasks
        ids = set(json.loads((HERE / "split_tasks.json").read_text())[split])
        return [task for task in tasks if task.id in ids]
